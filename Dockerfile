# Airflow 3.3.2 with mlrunway (operators, core, Azure ML SDK) for docker-compose.yml.
#
# CPU (default): torch==2.13.0 from PyTorch's CPU index, so no CUDA packages are pulled.
# GPU: build with PyTorch's CUDA index and give the workers the GPUs (README, "Docker Compose"):
#   TORCH_INDEX_URL=https://download.pytorch.org/whl/cu126 docker compose \
#       -f docker-compose.yml -f docker-compose.gpu.yml up --build
FROM apache/airflow:3.3.2-python3.11

ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu

USER airflow
# torch first, from the chosen index and pinned, before anything that depends on it.
RUN pip install --no-cache-dir torch==2.13.0 --index-url "${TORCH_INDEX_URL}"

COPY --chown=airflow:0 pyproject.toml README.md /opt/mlrunway/src/
COPY --chown=airflow:0 mlrunway /opt/mlrunway/src/mlrunway
COPY --chown=airflow:0 operators /opt/mlrunway/src/operators
RUN pip install --no-cache-dir "/opt/mlrunway/src[azure]" "apache-airflow==3.3.2"

# The example data (scikit-learn's digits as PNG files), where MLRUNWAY_DATA_DIR points.
RUN python -m mlrunway.data /opt/mlrunway/data/digits
