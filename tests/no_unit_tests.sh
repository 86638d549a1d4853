#!/bin/sh
# In make check in place of the unit tests when configure built none (no
# CMocka for this host, or --disable-tests): a suite without them must not
# pass.
echo "FAIL: the unit tests are not built: configure found no CMocka for this host (Debian package: libcmocka-dev) or was given --disable-tests"
exit 1
