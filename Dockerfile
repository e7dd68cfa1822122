# syntax=docker/dockerfile:1
# gpushare-webhook image: `docker build -t gpushare-webhook:0.1.0 .` (see docs/install.md).

# Build stage: installs the project into a virtualenv. Only this stage has pip's build
# machinery; every dependency comes as a binary wheel, so no compiler is needed here either.
FROM python:3.11-slim-bookworm AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
# constraints.txt pins every runtime dependency at the version CI tested (.ci/run installs with it too).
COPY pyproject.toml README.md constraints.txt ./
COPY policies ./policies
COPY webhook ./webhook
COPY certs ./certs
# [server]: what `gpushare serve` needs beside the base install (pyproject.toml).
RUN pip install --upgrade pip && pip install --constraint constraints.txt '.[server]' \
    && pip uninstall --yes pip \
    && find /opt/venv -name '__pycache__' -prune -exec rm -rf {} +

# Final stage: the same slim base (no compilers, no build tools), the virtualenv, a numeric
# non-root user. Files stay owned by root and read-only to the process; the root filesystem
# can be mounted read-only (the Deployment does).
FROM python:3.11-slim-bookworm
COPY --from=build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
USER 65532:65532
EXPOSE 8443
ENTRYPOINT ["gpushare", "serve"]
CMD ["--cert-dir", "/etc/gpushare/tls"]
