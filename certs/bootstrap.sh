#!/bin/sh
# Create or renew hami-web's CA and serving certificate. A thin wrapper around `hami-web certs`, which does
# the work with the `cryptography` library; every argument is passed through. Safe to re-run: a certificate
# with more than 30 days left is kept.
#
#   certs/bootstrap.sh --out-dir ./tls                         # files only, for local use
#   certs/bootstrap.sh --kubeconfig ~/.kube/config             # Secrets hami-system/hami-web-tls and
#                                                              # hami-web-ca, caBundle of webhook hami-web
#   certs/bootstrap.sh --in-cluster                            # the same from inside a pod (the k8s/ Job)
#
# `certs/bootstrap.sh --help` lists the options (service, namespace, secret names, lifetimes).
set -eu

if command -v hami-web >/dev/null 2>&1; then
    exec hami-web certs "$@"
fi
# Not installed as a command: run it from the source tree this script lives in.
here=$(CDPATH= cd -- "$(dirname -- "$0")/.." && pwd)
PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}" exec "${PYTHON:-python3}" -m hami_web certs "$@"
