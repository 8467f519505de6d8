# The file-based catalog as an image, for clusters with a registry:
#   docker build -f catalog/catalog.Dockerfile -t ghcr.io/quorum-dev/catalog:latest catalog
FROM quay.io/operator-framework/opm:latest
ENTRYPOINT ["/bin/opm"]
CMD ["serve", "/configs", "--cache-dir=/tmp/cache"]
COPY index.yaml /configs/quorum/index.yaml
# `serve --cache-dir` refuses to start on a cache it did not find (its integrity check): build
# it here, as opm's own catalogs do.
RUN ["/bin/opm", "serve", "/configs", "--cache-dir=/tmp/cache", "--cache-only"]
LABEL operators.operatorframework.io.index.configs.v1=/configs
