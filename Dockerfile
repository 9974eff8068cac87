# syntax=docker/dockerfile:1
# tailhound image: one image for the streams worker (default), the simulator and the node agent.
#
#   docker build -t tailhound:dev .
#   docker run --rm -e TAILHOUND_BROKER=kafka://kafka:9092 tailhound:dev            # streams worker
#   docker run --rm -e TAILHOUND_BROKER=kafka://kafka:9092 tailhound:dev simulate --speed 60
#
# Every runtime dependency ships as a manylinux wheel for CPython 3.11, so the slim image needs no
# compiler. The package is installed without extras: no scikit-learn (`tailhound[fit]`, only `baseline fit`
# needs it) and no broker. No HEALTHCHECK: the image runs several processes, each with its own endpoint
# (below); the orchestrator probes the one it runs (deploy/kubernetes, docker-compose.yml).

ARG PYTHON_VERSION=3.11

# ---- build: install the package and its dependencies into a self-contained virtualenv ----------
FROM python:${PYTHON_VERSION}-slim AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1
RUN python -m venv /opt/venv
# The whole (.dockerignore-filtered) context: pyproject.toml, its readme and license, and the folders its
# package-dir maps into the tailhound namespace (tailhound/, agents/, streams/, notifier/, rules/).
COPY . /src
RUN /opt/venv/bin/pip install /src

# ---- runtime --------------------------------------------------------------------------------
FROM python:${PYTHON_VERSION}-slim
LABEL org.opencontainers.image.title="tailhound" \
      org.opencontainers.image.description="Event-driven alert correlation for LLM inference fleets" \
      org.opencontainers.image.licenses="Apache-2.0"

ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    TAILHOUND_STREAMS__DATA_DIR=/var/lib/tailhound/streams

# Fixed numeric UID/GID so Kubernetes can verify runAsNonRoot without a runAsUser override.
RUN groupadd --system --gid 10001 tailhound \
 && useradd --system --uid 10001 --gid 10001 --home-dir /app --no-create-home \
            --shell /usr/sbin/nologin tailhound \
 && mkdir -p /app /var/lib/tailhound/streams \
 && chown -R 10001:10001 /var/lib/tailhound

COPY --from=build /opt/venv /opt/venv
WORKDIR /app
# The default rule pack and example configs ship inside the package (tailhound/rules, tailhound/examples);
# to use your own rules, mount a directory and point TAILHOUND_RULES_DIR at it.

USER 10001:10001
# What each process serves (all loopback by default: set the listen address to 0.0.0.0:PORT in a container):
#   9096  worker: /metrics, /-/healthy, /-/ready, POST /-/reload     (TAILHOUND_STREAMS__WEB_LISTEN)
#   9095  notifier API and incident console (the worker's notifier, or `tailhound notifier run`)
#                                                                    (TAILHOUND_NOTIFIER__API_LISTEN)
#   9097  ingest: POST /api/v1/write, /metrics, /-/healthy, /-/ready (`listen:` in ingest.yaml)
#   9464  agent: /metrics, /-/healthy, /-/ready                      (`listen:` in agent.yaml)
EXPOSE 9096 9095 9097 9464

ENTRYPOINT ["tailhound"]
CMD ["worker"]
