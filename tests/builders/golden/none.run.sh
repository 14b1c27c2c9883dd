#!/bin/bash
# Runs hello on this machine; rendered by appopt. Extra arguments are passed to the application.
# Override: APPOPT_CONTAINER=podman|docker|apptainer|singularity|charliecloud|none (or a list, tried in order),
# APPOPT_IMAGE=image reference, .sif path or SquashFS file, APPOPT_PYTHON=the Python to use without a container.
set -euo pipefail

# The container runtime: the first of APPOPT_CONTAINER (one name, or a list in order of preference) that is
# installed here; by default the first of: podman docker apptainer singularity charliecloud none.
pick_container() {
    local wanted=${APPOPT_CONTAINER:-"podman docker apptainer singularity charliecloud none"} candidate
    for candidate in ${wanted//,/ }; do
        case "$candidate" in
            none) echo none; return 0 ;;
            charliecloud) command -v ch-run >/dev/null 2>&1 && { echo charliecloud; return 0; } ;;
            docker) docker version --format '{{.Server.Version}}' >/dev/null 2>&1 && { echo docker; return 0; } ;;
            podman|apptainer|singularity) command -v "$candidate" >/dev/null 2>&1 && { echo "$candidate"; return 0; } ;;
            *) echo "run.sh: APPOPT_CONTAINER: unknown runtime '$candidate' (expected some of: podman docker apptainer singularity charliecloud none)" >&2
               return 2 ;;
        esac
    done
    echo "run.sh: none of '$wanted' is installed here (docker needs a reachable daemon, charliecloud ch-run): install one, or set APPOPT_CONTAINER=none to run without a container" >&2
    return 3
}
CONTAINER=$(pick_container) || exit $?
echo "run.sh: container runtime: $CONTAINER (the first found of: ${APPOPT_CONTAINER:-podman docker apptainer singularity charliecloud none}; APPOPT_CONTAINER chooses)" >&2
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
    charliecloud)
        IMAGE=${APPOPT_IMAGE:-hello.sqfs}
        if [ ! -e "$IMAGE" ]; then
            echo "run.sh: charliecloud: no image $IMAGE: build it with \`appopt build DIR --engine charliecloud\`, or convert an OCI build (ch-convert -i podman -o squash IMAGE $IMAGE), or set APPOPT_IMAGE" >&2
            exit 3
        fi
        # ch-run wants USER; --set-env applies the image's ENV (its venv's python first on PATH, PYTHONPATH). A
        # SquashFS image is read-only, so the bound working directory must exist in it (a site's /home or /scratch).
        export USER=${USER:-$(id -un)}
        exec ch-run --set-env --bind "$WORKDIR" --cd "$WORKDIR" "$IMAGE" -- "${APP[@]}" "$@" ;;
    none)
        # No container: the plan's output directory (model, runtime, code) stands in for the image's
        # /opt/app.
        APP_DIR=${APPOPT_APP_DIR:-"$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"}
        export PYTHONPATH="$APP_DIR${PYTHONPATH:+:$PYTHONPATH}"
        APP=("${APP[@]/#"/opt/app/"/"$APP_DIR/"}")
        exec "${APP[@]}" "$@" ;;
esac
