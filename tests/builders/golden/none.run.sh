#!/bin/bash
# Runs hello on this machine; rendered by appopt. Extra arguments are passed to the application.
# Override: APPOPT_CONTAINER=docker|podman|singularity|apptainer|none, APPOPT_IMAGE=image reference or .sif path.
set -euo pipefail

CONTAINER=${APPOPT_CONTAINER:-docker}
WORKDIR=$PWD

APP=(echo hello)

case "$CONTAINER" in
    docker)
        IMAGE=${APPOPT_IMAGE:-hello:latest}
        exec docker run --rm -v "$WORKDIR:$WORKDIR" -w "$WORKDIR" \
            --entrypoint "${APP[0]}" "$IMAGE" "${APP[@]:1}" "$@" ;;
    podman)
        IMAGE=${APPOPT_IMAGE:-hello:latest}
        exec podman run --rm -v "$WORKDIR:$WORKDIR" -w "$WORKDIR" \
            --entrypoint "${APP[0]}" "$IMAGE" "${APP[@]:1}" "$@" ;;
    singularity|apptainer)
        IMAGE=${APPOPT_IMAGE:-docker://hello:latest}
        exec "$CONTAINER" exec --bind "$WORKDIR" --pwd "$WORKDIR" "$IMAGE" "${APP[@]}" "$@" ;;
    none)
        # No container: the plan's output directory (model, runtime, code) stands in for the image's
        # /opt/app.
        APP_DIR=${APPOPT_APP_DIR:-"$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"}
        export PYTHONPATH="$APP_DIR${PYTHONPATH:+:$PYTHONPATH}"
        APP=("${APP[@]/#"/opt/app/"/"$APP_DIR/"}")
        exec "${APP[@]}" "$@" ;;
    *)
        echo "run.sh: APPOPT_CONTAINER must be docker, podman, singularity, apptainer or none, not '$CONTAINER'" >&2
        exit 2 ;;
esac
