# syntax=docker/dockerfile:1
# CAPER verifier on GPU: onnxruntime-node with its CUDA 12 execution provider.
#   docker build -t caper-verifier .
#   docker run --gpus all -p 8080:8080 caper-verifier                       # model baked from models/default
#   docker run --gpus all -p 8080:8080 -e CAPER_MODEL=models/small caper-verifier   # the fast small model, baked too
#   docker run --gpus all -p 8080:8080 -v $PWD/models/default:/app/models/default:ro \
#              -v /path/to/spider/database:/data/db:ro caper-verifier --db-dir /data/db   # mounted model + databases
# `--device auto` (the default) tries CUDA and falls back to CPU; GET /info and /readyz say which runs.

ARG NODE_VERSION=20
ARG CUDA_IMAGE=nvidia/cuda:12.4.1-cudnn-runtime-ubuntu22.04

# Node and npm come from the official image; they are official nodejs.org builds (glibc >= 2.28).
FROM node:${NODE_VERSION}-bookworm-slim AS node

# Build on the runtime's own base so better-sqlite3's native addon links against the same glibc
# and libstdc++ it will run with.
FROM ${CUDA_IMAGE} AS build
COPY --from=node /usr/local/bin/node /usr/local/bin/node
COPY --from=node /usr/local/lib/node_modules /usr/local/lib/node_modules
RUN ln -s ../lib/node_modules/npm/bin/npm-cli.js /usr/local/bin/npm \
    && ln -s ../lib/node_modules/npm/bin/npx-cli.js /usr/local/bin/npx
WORKDIR /app
# Toolchain only in case better-sqlite3 has no prebuilt binary for this platform.
RUN apt-get update && apt-get install -y --no-install-recommends python3 make g++ ca-certificates \
    && rm -rf /var/lib/apt/lists/*
COPY package.json package-lock.json ./
# package.json's allowScripts keeps onnxruntime-node's download step from running for CPU-only
# development; here the explicit run below, with the variable its install script reads, makes sure
# the CUDA execution provider libraries (fetched from the onnxruntime NuGet feed) are present.
# --ignore-scripts: the package's own `prepare` (tsc) cannot run before the sources are copied;
# the two dependency install steps that matter run explicitly instead.
ENV ONNXRUNTIME_NODE_INSTALL=cuda12
RUN npm ci --ignore-scripts \
    && npm rebuild better-sqlite3 \
    && node node_modules/onnxruntime-node/script/install.js \
    && ls node_modules/onnxruntime-node/bin/napi-v6/linux/x64/ | grep -q providers_cuda
COPY tsconfig.json ./
COPY src ./src
COPY scripts ./scripts
COPY bench ./bench
COPY test ./test
RUN npx tsc -p . && npm prune --omit=dev

FROM ${CUDA_IMAGE}
COPY --from=node /usr/local/bin/node /usr/local/bin/node
RUN groupadd --system --gid 10001 caper && useradd --system --uid 10001 --gid caper --home-dir /app caper
WORKDIR /app
COPY --from=build --chown=caper:caper /app/node_modules ./node_modules
COPY --from=build --chown=caper:caper /app/dist ./dist
COPY --chown=caper:caper package.json ./
COPY --chown=caper:caper openapi ./openapi
# Baked models: models/default (served) and models/small (the fast option: -e CAPER_MODEL=models/small),
# with the manifest schema every model is validated against; mount over /app/models/default to use
# another one. Named one by one so a local training output under models/ is never baked in.
COPY --chown=caper:caper models/caper.schema.json ./models/
COPY --chown=caper:caper models/default ./models/default
COPY --chown=caper:caper models/small ./models/small
USER caper
ENV NODE_ENV=production
EXPOSE 8080
# Settings as CAPER_* variables (docker run -e CAPER_DB_DIR=/data/db ...; flags after the image
# name still win). The probe is readiness: /healthz is 200 even while the model failed to load.
ENV CAPER_HOST=0.0.0.0 CAPER_PORT=8080 CAPER_MODEL=models/default CAPER_DEVICE=auto
HEALTHCHECK --interval=15s --timeout=3s --start-period=60s --retries=3 \
    CMD ["node", "-e", "fetch('http://127.0.0.1:' + process.env.CAPER_PORT + (process.env.CAPER_BASE_PATH || '') + '/readyz').then(r => process.exit(r.ok ? 0 : 1), () => process.exit(1))"]
ENTRYPOINT ["node", "dist/src/cli.js", "serve"]
CMD []
