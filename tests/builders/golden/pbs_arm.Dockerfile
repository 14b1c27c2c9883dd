# Dockerfile rendered by appopt from the plan; edit the spec and plan again rather than this file.
# Build in this directory (the build context): docker build -t IMAGE .   (podman build and buildah bud work too)

FROM python:3.11 AS build
# The build stage installs the dependencies and compiles the model.
RUN python3 -m venv --without-pip --system-site-packages /opt/appopt/venv
ENV PATH="/opt/appopt/venv/bin:$PATH"
COPY wheelhouse /opt/appopt/wheelhouse
RUN /opt/appopt/venv/bin/python -m pip install --no-cache-dir --disable-pip-version-check --no-index --find-links /opt/appopt/wheelhouse onnx numpy && \
    rm -rf /opt/appopt/wheelhouse
COPY runtime /opt/app/runtime
COPY model.onnx /opt/app/model.onnx
ENV PYTHONPATH="/opt/app"
WORKDIR /opt/app
RUN python3 -m runtime compile /opt/app/model.onnx -o /opt/app/compiled

FROM python:3.11-slim AS final
# The final stage keeps only what the application needs at run time.
COPY --from=build /opt/appopt/venv /opt/appopt/venv
ENV PATH="/opt/appopt/venv/bin:$PATH"
COPY --from=build /opt/app /opt/app
ENV PYTHONPATH="/opt/app"
ENV OMP_NUM_THREADS="12" \
    XOS_MMM_L_HPAGE_TYPE="none"
LABEL org.opencontainers.image.title="bert-a64fx" \
    org.opencontainers.image.base.name="python:3.11-slim" \
    org.opencontainers.image.version="1.0" \
    io.appopt.route="appopt-runtime+none+onednn/fp32/nchw" \
    io.appopt.predicted-step-seconds="0.0123"
ENTRYPOINT ["python3", "-m", "runtime", "run", "/opt/app/compiled", "--random", "--repeat", "20"]
