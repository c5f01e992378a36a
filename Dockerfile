# The Baton image: one static binary on a distroless base, run as a non-root user.
#
#   docker build -t baton .
#   docker run --rm baton version
#
# deploy/compose.yaml runs it as two replicas on PostgreSQL and Redis.

FROM golang:1.26-bookworm AS build
WORKDIR /src
# Modules first, so that a change to the code does not download them again.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG BATON_VERSION=
RUN BATON_VERSION=$BATON_VERSION sh scripts/build-static.sh /out/baton

# distroless/static has no shell and no package manager: CA certificates, tzdata, /etc/passwd.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/baton /usr/local/bin/baton
# The nonroot user (uid 65532) of the base image; baton dev writes under its home.
USER nonroot:nonroot
WORKDIR /home/nonroot
EXPOSE 8080 8081 9090
ENTRYPOINT ["/usr/local/bin/baton"]
CMD ["server"]
