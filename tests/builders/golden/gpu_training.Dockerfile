# Dockerfile rendered by appopt from the plan; edit the spec and plan again rather than this file.
# Build in this directory (the build context): docker build -t IMAGE .   (podman build and buildah bud work too)

FROM nvcr.io/nvidia/pytorch:24.01-py3 AS build
# The build stage installs the dependencies and compiles the model.
RUN apt-get update && \
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends libgomp1 && \
    rm -rf /var/lib/apt/lists/*
RUN python3 -m venv --without-pip --system-site-packages /opt/appopt/venv
ENV PATH="/opt/appopt/venv/bin:$PATH"
RUN /opt/appopt/venv/bin/python -m pip install --no-cache-dir --disable-pip-version-check 'onnx>=1.16' numpy
COPY runtime /opt/app/runtime
COPY model.onnx /opt/app/model.onnx
ENV PYTHONPATH="/opt/app"
WORKDIR /opt/app
RUN python3 -m runtime compile /opt/app/model.onnx -o /opt/app/compiled

FROM nvcr.io/nvidia/pytorch:24.01-py3 AS final
# The final stage keeps only what the application needs at run time.
RUN apt-get update && \
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends libgomp1 && \
    rm -rf /var/lib/apt/lists/*
COPY --from=build /opt/appopt/venv /opt/appopt/venv
ENV PATH="/opt/appopt/venv/bin:$PATH"
COPY --from=build /opt/app /opt/app
ENV PYTHONPATH="/opt/app"
ENV OMP_NUM_THREADS="8" \
    APPOPT_PRECISION="fp16"
LABEL org.opencontainers.image.title="resnet50-train" \
    org.opencontainers.image.base.name="nvcr.io/nvidia/pytorch:24.01-py3" \
    org.opencontainers.image.version="1.0" \
    io.appopt.route="appopt-runtime+none+onednn/fp32/nchw" \
    io.appopt.predicted-step-seconds="0.0123"
ENTRYPOINT ["python3", "-m", "runtime", "run", "/opt/app/compiled", "--random", "--repeat", "20"]
