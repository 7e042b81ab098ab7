# Airflow 3.3.2 with mlrunway (operators, core, Azure ML SDK) for docker-compose.yml.
#
# CPU (default): torch==2.13.0 from PyTorch's CPU index, so no CUDA packages are pulled.
# GPU: build with PyTorch's CUDA index and give the workers the GPUs (README, "Docker Compose"):
#   TORCH_INDEX_URL=https://download.pytorch.org/whl/cu126 docker compose \
#       -f docker-compose.yml -f docker-compose.gpu.yml up --build
FROM apache/airflow:3.3.2-python3.11 AS wheel
# The project as users get it: its wheel (mlrunway only, the operators as mlrunway.operators).
COPY --chown=airflow:0 pyproject.toml README.md /tmp/src/
COPY --chown=airflow:0 mlrunway /tmp/src/mlrunway
COPY --chown=airflow:0 operators /tmp/src/operators
RUN pip wheel --no-cache-dir --no-deps -w /tmp/dist /tmp/src

FROM apache/airflow:3.3.2-python3.11

ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu

USER airflow
# torch first, from the chosen index and pinned, before anything that depends on it.
RUN pip install --no-cache-dir torch==2.13.0 --index-url "${TORCH_INDEX_URL}"

# The wheel with the extras these services need: [local] (the embedded backend, export) and [azure], at the
# versions the repository tests (constraints.txt), beside the image's own Airflow.
COPY --from=wheel /tmp/dist /opt/mlrunway/dist
COPY --chown=airflow:0 constraints.txt /opt/mlrunway/constraints.txt
RUN pip install --no-cache-dir -c /opt/mlrunway/constraints.txt "apache-airflow==3.3.2" \
        "mlrunway[local,azure] @ file://$(ls /opt/mlrunway/dist/mlrunway-*.whl)"

# The example data (scikit-learn's digits as PNG files), where MLRUNWAY_DATA_DIR points.
RUN python -m mlrunway.data /opt/mlrunway/data/digits
