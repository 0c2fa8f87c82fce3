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
# HAMi's Helm chart runs this image unchanged (README "Switching from HAMi"): its Deployment starts `scheduler`
# (HAMi's command line, a console script of the package, on PATH in /usr/local/bin) with --http_bind=0.0.0.0:443,
# gives no securityContext, and our user is not root, so binding port 443 needs CAP_NET_BIND_SERVICE. Chosen: a
# file capability, on a copy of the interpreter that only `scheduler` runs (its shebang is rewritten to it):
# - a container without a securityContext keeps CAP_NET_BIND_SERVICE in its bounding set (the runtimes' default
#   set), so exec'ing a file with cap_net_bind_service=+ep gives a non-root process that one capability and no other;
# - not on /usr/local/bin/python3.11 itself: a pod that drops ALL capabilities (our k8s/ manifests and chart do, for
#   `hami-web serve` on 8443) cannot exec a file whose effective capability is outside its bounding set (EPERM), so
#   `hami-web` keeps the plain interpreter and never holds the capability;
# - not the sysctl net.ipv4.ip_unprivileged_port_start=0: a Deployment can set it only through the pod's
#   securityContext.sysctls, which the chart does not, and runtimes default to it only in some versions;
# - not running as root: the image stays non-root for every other use.
# With allowPrivilegeEscalation: false (no_new_privs) the capability is not granted and the bind to 443 fails
# naming the address; then use ports above 1023 or add NET_BIND_SERVICE there.
RUN apt-get update \
    && apt-get install --yes --no-install-recommends libcap2-bin \
    && cp /usr/local/bin/python3.11 /usr/local/bin/python3.11-scheduler \
    && setcap cap_net_bind_service=+ep /usr/local/bin/python3.11-scheduler \
    && sed -i '1s|^#!.*|#!/usr/local/bin/python3.11-scheduler|' /usr/local/bin/scheduler \
    && apt-get purge --yes --auto-remove libcap2-bin \
    && rm -rf /var/lib/apt/lists/*
# Numeric, so Kubernetes' runAsNonRoot can verify it without reading /etc/passwd.
USER 10001:10001
EXPOSE 8443
EXPOSE 9395
EXPOSE 443
# `hami-web serve` runs gunicorn (one worker: event loop + threads; TLS from --cert-file/--key-file) on 8443
# (webhook), 127.0.0.1:8444 (extender, not exposed) and 9395 (metrics); see k8s/deployment.yaml. HAMi's chart
# replaces the entry point with its command, `scheduler --http_bind=0.0.0.0:443 …` (one listener on 443).
ENTRYPOINT ["hami-web"]
CMD ["serve"]
