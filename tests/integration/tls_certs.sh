#!/bin/sh
# tls_certs.sh OPENSSL DIR PROGRAM [ARG...] - make a throwaway CA, a server
# certificate for 127.0.0.1 and localhost signed by it, a client certificate
# signed by it and a second, unrelated CA in DIR (made anew), then run
# PROGRAM DIR ARG... (tests/unit/test_auth_tls.c).
set -eu
openssl=$1 dir=$2 prog=$3
shift 3
rm -rf "$dir"
mkdir -p "$dir"
cd "$dir"
q() { "$openssl" "$@" >/dev/null 2>&1 || { echo "openssl $1 failed" >&2; exit 1; }; }
q req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout ca.key -out ca.pem \
  -days 2 -subj "/CN=tidemark test CA"
q req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout other-ca.key \
  -out other-ca.pem -days 2 -subj "/CN=another CA"
q req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout server.key -out server.csr \
  -subj "/CN=127.0.0.1"
printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n' > server.ext
q x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.pem -days 2 \
  -extfile server.ext
q req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout client.key -out client.csr \
  -subj "/CN=tidemark test client"
printf 'extendedKeyUsage=clientAuth\n' > client.ext
q x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out client.pem -days 2 \
  -extfile client.ext
exec "$prog" "$dir" "$@"
