# One image for the API and the workers. Build with --build-arg TORCH_INDEX_URL=... to pick a
# CUDA or CPU wheel of torch; the default takes PyPI's (CUDA) build for the GPU worker.
FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
WORKDIR /srv
ARG TORCH_VERSION=2.13.0
RUN pip install --no-cache-dir "torch==${TORCH_VERSION}"
COPY pyproject.toml README.md alembic.ini ./
COPY recycling_core recycling_core
COPY app app
COPY workers workers
COPY migrations migrations
RUN pip install --no-cache-dir .
RUN useradd --create-home recycle && mkdir -p /data && chown recycle /data
USER recycle
EXPOSE 8000
CMD ["recycle", "serve", "--production", "--host", "0.0.0.0", "--port", "8000"]
