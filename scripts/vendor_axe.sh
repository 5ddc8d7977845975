#!/bin/sh
# Vendor axe-core for the console's accessibility test: the exact version and integrity that
# tests/a11y/package-lock.json pins (npm ci checks the hash), copied to tests/vendor/axe.min.js.
# Run it after changing the pinned version; the test reads only the vendored file.
set -eu
cd "$(dirname "$0")/../tests/a11y"
npm ci --no-audit --no-fund --ignore-scripts
version=$(node -p 'require("axe-core/package.json").version')
cp node_modules/axe-core/axe.min.js ../vendor/axe.min.js
echo "$version" > ../vendor/axe.version
rm -rf node_modules
echo "vendored axe-core $version into tests/vendor/axe.min.js"
