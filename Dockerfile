# syntax=docker/dockerfile:1
# The trainjobs operator image: `docker build -t trainjobs/operator:0.1.0 .`
# The tag is the chart's appVersion (charts/trainjobs/Chart.yaml), which is pyproject's version.
#
# Stage 1 builds the trainjobs wheel (the operator, the CLI and the built-in plugins, which
# register through the `trainjobs` entry-point group exactly as a third-party plugin would) and
# fetches the wheels of exactly the runtime dependencies uv.lock pins (hash-checked). Stage 2
# installs only those wheels, from the local directory, into a slim Python: no compiler, no
# build tools, no source tree. `make image` builds the equivalent image without a container
# engine (scripts/build-image.sh, docs/helm.md).
ARG PYTHON_IMAGE=python:3.11-slim

FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
WORKDIR /src
COPY . .
RUN pip install uv==0.13.9 \
 && uv export --frozen --no-emit-project --no-dev -o /tmp/requirements.txt \
 && pip download --only-binary=:all: --require-hashes -r /tmp/requirements.txt -d /wheels \
 && uv build --wheel --out-dir /wheels .

FROM ${PYTHON_IMAGE}
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="trainjobs operator" \
      org.opencontainers.image.description="Kubernetes operator for distributed MXNet, TensorFlow and Caffe2 training jobs" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-index --no-deps /wheels/*.whl \
 && groupadd --gid 65532 trainjobs \
 && useradd --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin trainjobs \
 && python3.11 -m trainjobs.cli operator --help >/dev/null
# A numeric UID, so that Kubernetes' runAsNonRoot can verify it without reading /etc/passwd.
USER 65532:65532
WORKDIR /tmp
EXPOSE 8080
# The same entry point as `make image`'s (scripts/build-image.sh).
ENTRYPOINT ["python3.11", "-m", "trainjobs.cli"]
CMD ["operator"]
