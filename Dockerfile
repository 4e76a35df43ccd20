# gatectl as a static binary in a distroless image, run as a non-root user.
#
#   docker build -t gatectl --build-arg VERSION=$(git describe --tags --always) .
#   docker run --rm -p 7878:7878 -v $PWD/gatectl.yaml:/etc/gatectl/gatectl.yaml:ro \
#     -e GATECTL_TOKEN=... -e OPENAI_API_KEY=... gatectl
#
# The image runs `gatectl serve --config /etc/gatectl/gatectl.yaml --listen
# 0.0.0.0:7878`: mount your config there. Listening beyond loopback needs an API
# token (api.tokenEnv in the config, the variable set with -e), or serve refuses
# to start. The state file lives in /var/lib/gatectl (a volume).

# Build stage: the Go toolchain, nothing of it reaches the final image.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
# CGO_ENABLED=0: a static binary that needs no libc in the final image. The
# context has no .git (.dockerignore), so the version, with its commit, comes from
# VERSION (git describe --always names the commit).
RUN CGO_ENABLED=0 go build -trimpath -buildvcs=false -ldflags "-s -w -X main.version=${VERSION}" -o /out/gatectl ./cmd/gatectl \
 && mkdir -p /out/state

# Final stage: distroless/static has CA certificates and tzdata, no shell, and a
# nonroot user (65532).
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/gatectl /usr/local/bin/gatectl
COPY --from=build --chown=65532:65532 /out/state /var/lib/gatectl
USER 65532:65532
VOLUME ["/var/lib/gatectl"]
EXPOSE 7878
ENTRYPOINT ["/usr/local/bin/gatectl"]
CMD ["serve", "--config", "/etc/gatectl/gatectl.yaml", "--listen", "0.0.0.0:7878", "--state-dir", "/var/lib/gatectl"]
