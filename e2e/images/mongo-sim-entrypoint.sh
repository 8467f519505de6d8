#!/bin/sh
# The entry point of the MongoDB replica-set simulator's image, under the contract of the official
# mongo image's docker-entrypoint.sh that the MongoDB operator's StatefulSet relies on: `mongod`
# and its arguments, the root user from MONGO_INITDB_ROOT_USERNAME(_FILE) and
# MONGO_INITDB_ROOT_PASSWORD(_FILE) created on an empty dbpath. This image runs `mongo-sim`, not
# MongoDB (see the README).
set -eu
[ "${1:-}" = mongod ] && shift
for name in MONGO_INITDB_ROOT_USERNAME MONGO_INITDB_ROOT_PASSWORD; do
  eval "file=\${${name}_FILE:-}"
  if [ -n "$file" ]; then
    value=$(cat "$file")
    export "$name=$value"
  fi
done
# The simulator knows itself by its listening address: --bind_ip_all becomes the pod's address.
address=$(hostname -i | cut -d' ' -f1)
first=1
for argument in "$@"; do
  if [ $first = 1 ]; then set --; first=0; fi
  case $argument in
    --bind_ip_all) set -- "$@" --bind_ip "$address" ;;
    *) set -- "$@" "$argument" ;;
  esac
done
[ -n "${MONGODB_VERSION:-}" ] && set -- "$@" --sim-version "$MONGODB_VERSION"
exec /usr/local/bin/mongo-sim "$@"
