"""A person's answer on a challenger waiting for approval (``require_approval``), from a shell:

    python -m mlrunway.airflow.approval show    digits-onnx 7 [--conn mlrunway_default]
    python -m mlrunway.airflow.approval approve digits-onnx 7 [--by alice]
    python -m mlrunway.airflow.approval reject  digits-onnx 7 [--by alice]

The answer is the version's ``mlrunway.approval`` tag; the waiting deploy task reads it (ApprovalTrigger). On
Azure ML a person can equally edit the tag in studio.
"""

from __future__ import annotations

import argparse
import getpass
import json
import sys

from mlrunway.airflow.hook import DEFAULT_CONN_ID, MlrunwayHook
from mlrunway.deploy import APPROVAL_BY_TAG, APPROVAL_TAG


def build_parser() -> argparse.ArgumentParser:
    """The command line (the docs' reference prints its help)."""
    parser = argparse.ArgumentParser(prog="python -m mlrunway.airflow.approval", description=__doc__.split("\n")[0])
    parser.add_argument("action", choices=["show", "approve", "reject"],
                        help="show the approval asked and the gate's evidence, or answer it")
    parser.add_argument("model", help="the registered model (the run's ONNX model, e.g. digits-onnx)")
    parser.add_argument("version", type=int, help="the version waiting for approval")
    parser.add_argument("--conn", default=DEFAULT_CONN_ID, help="the backend's Airflow connection")
    parser.add_argument("--by", default=getpass.getuser(), help="who answers (recorded on the version)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    backend = MlrunwayHook(args.conn).get_backend()
    tags = backend.models.get(args.model, args.version).tags
    if args.action == "show" or tags.get(APPROVAL_TAG) != "pending":
        evidence = json.loads(tags.get("mlrunway.evidence", "{}")).get("gate", {})
        print(f"{args.model}:{args.version}: approval {tags.get(APPROVAL_TAG, 'not asked')}; gate {evidence}")
        return 0 if args.action == "show" else 1
    answer = "approved" if args.action == "approve" else "rejected"
    backend.models.update_tags(args.model, args.version, {APPROVAL_TAG: answer, APPROVAL_BY_TAG: args.by})
    print(f"{args.model}:{args.version}: {answer} by {args.by}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
