# One image with every opledger binary; compose.yaml picks the command.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -o /out/ ./cmd/opledger ./services/...

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/ /usr/local/bin/
COPY examples/registry.yaml /etc/opledger/registry.yaml
ENV OPLEDGER_REGISTRY=/etc/opledger/registry.yaml
USER nonroot
