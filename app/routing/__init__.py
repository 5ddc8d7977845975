"""Routes, retries, fallback, hedging, circuit breakers: everything before the first content.

`config` (route shapes, read by app/settings.py), `router` (sessions and the opener), `stream`
(the routed patch stream and its deadlines), `breaker`, `errors`. Import the submodules: this
package imports nothing, so that settings can read `config` without the providers.
"""
