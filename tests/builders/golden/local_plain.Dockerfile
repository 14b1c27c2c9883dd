# Dockerfile rendered by appopt from the plan; edit the spec and plan again rather than this file.
# Build in this directory (the build context): docker build -t IMAGE .   (podman build and buildah bud work too)

FROM localhost/base:busybox AS final
LABEL org.opencontainers.image.title="hello" \
    org.opencontainers.image.base.name="localhost/base:busybox"
ENTRYPOINT ["echo", "hello"]
