#!/bin/sh
# Run a command trusting an extra CA (a corporate proxy's) when the build was given one as the
# BuildKit secret `extra_ca` (`--secret id=extra_ca,src=corp-ca.pem`). pip, git, OpenSSL and
# requests each read their own variable; all point at one combined bundle in a temp file that is
# removed before this RUN step ends, so no image layer ever holds it. Without the secret: plain "$@".
set -eu
secret=/run/secrets/extra_ca
if [ -s "$secret" ]; then
  bundle=$(mktemp /tmp/ca-bundle.XXXXXX)
  trap 'rm -f "$bundle"' EXIT
  for system in /etc/ssl/certs/ca-certificates.crt /etc/pki/tls/certs/ca-bundle.crt; do
    if [ -s "$system" ]; then cat "$system" >>"$bundle"; break; fi
  done
  cat "$secret" >>"$bundle"
  export PIP_CERT="$bundle" SSL_CERT_FILE="$bundle" REQUESTS_CA_BUNDLE="$bundle" GIT_SSL_CAINFO="$bundle" CURL_CA_BUNDLE="$bundle"
  echo "[with-extra-ca] trusting the extra CA for this step"
fi
"$@"
