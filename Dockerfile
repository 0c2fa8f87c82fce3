# hami-web image: docker build -t hami-web:0.1.0 .
# Stage 1 builds wheels for hami-web and its runtime dependencies; stage 2 installs only those wheels
# into a clean slim image (no compiler, no build tools, no pip cache) and runs as an unprivileged user.
FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml setup.cfg README.md* ./
COPY hami_web ./hami_web
RUN pip wheel --wheel-dir /wheels .

FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN groupadd --gid 10001 hami-web \
    && useradd --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin hami-web
# The wheels are bind-mounted from the build stage (BuildKit, the default builder), so no layer keeps them.
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-index --find-links=/wheels hami-web
# Numeric, so Kubernetes' runAsNonRoot can verify it without reading /etc/passwd.
USER 10001:10001
EXPOSE 8443
EXPOSE 9395
# `hami-web serve` runs gunicorn (one worker: event loop + threads; TLS from --cert-file/--key-file) on 8443
# (webhook), 127.0.0.1:8444 (extender, not exposed) and 9395 (metrics); see k8s/deployment.yaml.
ENTRYPOINT ["hami-web"]
CMD ["serve"]
