# The file-based catalog as an image, for clusters with a registry:
#   docker build -f catalog/catalog.Dockerfile -t ghcr.io/quorum-dev/catalog:latest catalog
FROM quay.io/operator-framework/opm:latest
ENTRYPOINT ["/bin/opm"]
CMD ["serve", "/configs", "--cache-dir=/tmp/cache"]
COPY index.yaml /configs/quorum/index.yaml
LABEL operators.operatorframework.io.index.configs.v1=/configs
