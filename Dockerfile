# syntax=docker/dockerfile:1
# The lagtrace service image: one image for every role, each a lagtrace command: serve
# (waitress serving the API and dashboard), worker, beat, migrate, alive (the liveness
# probe), or any other. tini runs lagtrace as its child, so SIGTERM reaches it directly.
#
#   docker build -t lagtrace:dev .
#
# Where no registry answers, .ci/build-service-image.sh builds this same file on a
# locally debootstrapped Debian trixie (--build-arg BASE=...), so both paths share
# every instruction below.
#
# Trixie, not bookworm: lagtrace unpacks uploaded archives with tarfile's "data" filter,
# which bookworm's Python 3.11.2 lacks (it came in 3.11.4); trixie's is 3.13.
ARG BASE=debian:trixie-slim

# --- build: a virtualenv with lagtrace and its dependencies (wheels only) -----------
FROM ${BASE} AS build
USER root
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      ca-certificates python3 python3-venv \
 && apt-get clean && rm -rf /var/lib/apt/lists/*
# The system's CA bundle, not pip's own: it holds any CA the base added (a company proxy).
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PIP_CERT=/etc/ssl/certs/ca-certificates.crt
RUN python3 -m venv /opt/lagtrace/venv
WORKDIR /src
# Dependencies first, from pyproject.toml alone: this layer is rebuilt only when they
# change, not on every edit of the source.
COPY pyproject.toml ./
RUN python3 -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]))' \
      > /tmp/requirements.txt \
 && /opt/lagtrace/venv/bin/pip install --only-binary=:all: -r /tmp/requirements.txt
COPY README.md ./
COPY services ./services
COPY api ./api
COPY web ./web
COPY worker ./worker
COPY cli ./cli
COPY migrations ./migrations
# --no-deps: the layer above installed them. The Alembic scripts are not a package;
# services/migrate.py looks for them beside the installed packages.
RUN /opt/lagtrace/venv/bin/pip install --no-deps . \
 && cp -r migrations "$(/opt/lagtrace/venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/migrations"
# The docker executor bind-mounts the static py-spy into run containers from the engine's
# filesystem. Kept apart from the venv (found on PATH), its directory can be given to a
# separate engine (the chart's dind) at the same path, or put first on PATH.
RUN mkdir -p /opt/lagtrace/tools && mv /opt/lagtrace/venv/bin/py-spy /opt/lagtrace/tools/py-spy \
 && /opt/lagtrace/venv/bin/python -m pip uninstall -q -y pip setuptools

# --- runtime: Debian's python3, tini, git for checkouts; no compiler, no pip cache --
FROM ${BASE} AS runtime
USER root
# tini is PID 1: it forwards SIGTERM to lagtrace (Celery then shuts down warm, finishing
# its task) and reaps the git and tool processes lagtrace leaves as orphans.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      ca-certificates git python3 tini \
 && apt-get clean \
 && rm -rf /var/lib/apt/lists/* /usr/share/doc/* /usr/share/man/* /usr/share/locale/* \
 && groupadd --gid 10001 lagtrace \
 && useradd --uid 10001 --gid 10001 --no-create-home --home-dir /srv/lagtrace --shell /usr/sbin/nologin lagtrace \
 && mkdir -p /srv/lagtrace/work /srv/lagtrace/artifacts \
 && chown -R 10001:10001 /srv/lagtrace
COPY --from=build /opt/lagtrace /opt/lagtrace
# The root filesystem may be read-only (the chart mounts volumes at /srv/lagtrace and
# /tmp): everything lagtrace writes goes below these two settings' directories.
ENV PATH=/opt/lagtrace/venv/bin:/opt/lagtrace/tools:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    LANG=C.UTF-8 \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOME=/srv/lagtrace \
    LAGTRACE_WORK_DIR=/srv/lagtrace/work \
    LAGTRACE_ARTIFACT_DIR=/srv/lagtrace/artifacts \
    LAGTRACE_WORKER_HEARTBEAT_FILE=/srv/lagtrace/work/heartbeat \
    LAGTRACE_HOST=0.0.0.0
LABEL org.opencontainers.image.title="lagtrace" \
      org.opencontainers.image.source="https://github.com/lagtrace/lagtrace" \
      org.opencontainers.image.licenses="Apache-2.0"
USER 10001:10001
WORKDIR /srv/lagtrace
EXPOSE 8080
ENTRYPOINT ["/usr/bin/tini", "--", "lagtrace"]
CMD ["serve"]
