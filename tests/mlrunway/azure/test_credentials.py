from __future__ import annotations

import datetime

import pytest
from azure import identity

from mlrunway.azure.credentials import credential, workspace_ref
from mlrunway.errors import SpecError

SUB = "00000000-1111-2222-3333-444444444444"
SP = {"tenant_id": "72f988bf-86f1-41af-91ab-2d7cd011db47", "client_id": "5d7e8a0c-1a2b-4c3d-9e8f-0a1b2c3d4e5f"}


def test_workspace_needs_all_three_names():
    ref = workspace_ref({"subscription_id": SUB, "resource_group": "rg", "workspace_name": "ws"})
    assert (ref.subscription_id, ref.resource_group, ref.workspace_name) == (SUB, "rg", "ws")
    with pytest.raises(SpecError, match="azure_ml connection.workspace_name: is missing; set workspace_name"):
        workspace_ref({"subscription_id": SUB, "resource_group": "rg"})
    with pytest.raises(SpecError, match="subscription_id: 'my-sub' is not a GUID"):
        workspace_ref({"subscription_id": "my-sub", "resource_group": "rg", "workspace_name": "ws"})


def self_signed_pem(path):
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import NameOID

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "mlrunway-test")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(1).not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1)).sign(key, hashes.SHA256()))
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()) + cert.public_bytes(serialization.Encoding.PEM))
    return str(path)


@pytest.mark.parametrize(
    ("fields", "secret", "cls"),
    [
        pytest.param({}, None, identity.DefaultAzureCredential, id="default"),
        pytest.param({"credential": "managed_identity", "client_id": SP["client_id"]}, None,
                     identity.ManagedIdentityCredential, id="managed-identity"),
        pytest.param({"credential": "client_secret", **SP}, "s3cret", identity.ClientSecretCredential, id="client-secret"),
        pytest.param({"credential": "workload_identity", **SP, "token_file_path": "/var/run/secrets/token"}, None,
                     identity.WorkloadIdentityCredential, id="workload-identity"),
    ],
)
def test_the_connection_chooses_the_credential(fields, secret, cls):
    assert isinstance(credential(fields, secret), cls)


def test_certificate_credential(tmp_path):
    fields = {"credential": "certificate", **SP, "certificate_path": self_signed_pem(tmp_path / "sp.pem")}
    assert isinstance(credential(fields), identity.CertificateCredential)


@pytest.mark.parametrize(
    ("fields", "secret", "message"),
    [
        pytest.param({"credential": "password"}, None, "credential: 'password' is not supported", id="unknown-kind"),
        pytest.param({"credential": "client_secret", "client_id": SP["client_id"]}, "x",
                     "connection.tenant_id: is needed for credential 'client_secret'", id="no-tenant"),
        pytest.param({"credential": "client_secret", **SP}, None, "connection.password: holds no client secret", id="no-secret"),
        pytest.param({"credential": "certificate", **SP}, None, "certificate_path: is needed", id="no-certificate"),
    ],
)
def test_missing_pieces_are_named(fields, secret, message):
    with pytest.raises(SpecError, match=message):
        credential(fields, secret)


def test_the_secret_never_appears_in_an_error():
    with pytest.raises(SpecError) as caught:
        credential({"credential": "client_secret", "client_id": SP["client_id"]}, "do-not-print-me")
    assert "do-not-print-me" not in str(caught.value)


@pytest.mark.parametrize(("cloud", "host"), [
    (None, "https://login.microsoftonline.com"), ("AzureUSGovernment", "https://login.microsoftonline.us"),
    ("AzureChinaCloud", "https://login.chinacloudapi.cn"),
])
def test_a_service_principal_signs_in_at_its_clouds_authority(cloud, host, tmp_path):
    """Issue 29, 8: a sovereign cloud's tenant is not at the public authority."""
    fields = {**SP, **({"cloud": cloud} if cloud else {})}
    assert credential({**fields, "credential": "client_secret"}, "s3cret")._authority == host
    certificate = {**fields, "credential": "certificate", "certificate_path": self_signed_pem(tmp_path / "sp.pem")}
    assert credential(certificate)._authority == host
    default = credential({**fields, "credential": "default"})
    shared = next(c for c in default.credentials if type(c).__name__ == "SharedTokenCacheCredential")
    assert shared._credential._authority == host  # DefaultAzureCredential hands the authority down its chain
    workload = credential({**fields, "credential": "workload_identity", "token_file_path": str(tmp_path / "t")})
    assert workload._client._authority == host
