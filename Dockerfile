# syntax=docker/dockerfile:1
# vllm-extproc-router: the Envoy ext_proc router, and (same image, other entrypoint) the vLLM
# simulator used by docker-compose.yml.
#
#   docker build -t vllm-extproc-router .
#   docker run --rm -p 9002:9002 -p 9090:9090 vllm-extproc-router --worker http://10.0.0.5:8000
#   docker run --rm --entrypoint node vllm-extproc-router dist/src/sim/cli.js --help
#
# Stage 1 compiles TypeScript with the dev dependencies; stage 2 installs production dependencies
# only and copies the compiled dist/src. Debian slim (glibc), not Alpine: zeromq ships prebuilt
# glibc binaries for linux x64/arm64, so nothing is compiled at install time.

ARG NODE_IMAGE=node:20-slim

FROM ${NODE_IMAGE} AS build
WORKDIR /app
COPY package.json package-lock.json ./
# --ignore-scripts: the package's own `prepare` (tsc) needs the sources, copied below; zeromq's
# install script only checks that its prebuilt addon loads. patch-package applies patches/ (the
# @huggingface/jinja patch: chat templates render ~6x faster), which the runtime stage copies.
COPY patches ./patches
RUN npm ci --no-audit --no-fund --ignore-scripts && npx patch-package --error-on-fail
COPY tsconfig.json tsconfig.build.json ./
COPY src ./src
COPY protos ./protos
RUN npx tsc -p tsconfig.build.json

FROM ${NODE_IMAGE} AS runtime
ENV NODE_ENV=production
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --no-audit --no-fund --ignore-scripts && npm cache clean --force
COPY --from=build /app/node_modules/@huggingface/jinja ./node_modules/@huggingface/jinja
COPY --from=build /app/dist/src ./dist/src
COPY protos ./protos
COPY envoy ./envoy
# The image's unprivileged `node` user (uid 1000).
USER node
# 9002: ext_proc gRPC (Envoy's ext_proc cluster); 9090: admin HTTP (/metrics, /healthz, /readyz,
# /workers). Discovery (--discovery-zmq tcp://0.0.0.0:30001) is off unless configured.
EXPOSE 9002 9090
# Liveness on the admin port; no curl in the slim image, so Node's fetch. A container started with
# --admin-port other than 9090, or with the simulator entrypoint, must override this check.
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:9090/healthz').then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))"]
ENTRYPOINT ["node", "--min-semi-space-size=16", "--initial-old-space-size=128", "dist/src/cli.js"]
CMD []
