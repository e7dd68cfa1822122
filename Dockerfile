# syntax=docker/dockerfile:1
# Build stage: compilers and build tools live only here.
FROM python:3.11-slim AS build
WORKDIR /src
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
COPY pyproject.toml README.md ./
COPY policies ./policies
COPY webhook ./webhook
COPY certs ./certs
RUN pip install --no-cache-dir --upgrade pip && pip install --no-cache-dir .

# Final stage: the virtualenv only, no compilers, a numeric non-root user.
FROM python:3.11-slim
COPY --from=build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
USER 65532:65532
EXPOSE 8443
ENTRYPOINT ["gpushare", "serve"]
CMD ["--cert-dir", "/etc/gpushare/tls"]
