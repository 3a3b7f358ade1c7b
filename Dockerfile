# pdrouter image: the binary `make build` builds, static (CGO_ENABLED=0), on a distroless base,
# running as a non-root user.
#   make image        (docker or podman, whichever has a running engine; IMAGE=... to tag), or
#   docker build --build-arg VERSION=$(git describe --tags --always) -t pdrouter:latest .
#   docker run --rm pdrouter:latest serve --help
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
# The Makefile's own build target, so the image holds the same binary as `make build`.
RUN CGO_ENABLED=0 make build VERSION=${VERSION} BIN=/out/router

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/router /router
USER 65532:65532
# serve: HTTP API on 30000, Prometheus /metrics on 29000 (fakeworker also listens on 30000).
EXPOSE 30000 29000
ENTRYPOINT ["/router"]
CMD ["serve", "--help"]
