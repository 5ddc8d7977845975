# Foundry Gateway: slim Python, non-root, installed from the runtime lock (requirements/runtime.lock.txt) as
# `make install` does: no test or docs tool in the image.
FROM python:3.12.8-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PATH=/opt/venv/bin:$PATH
RUN python -m venv /opt/venv && useradd --create-home --uid 10001 foundry
WORKDIR /srv/foundry
# The locked dependencies first (a layer that changes only with the lock), then the project alone.
COPY requirements/runtime.lock.txt requirements/runtime.lock.txt
RUN pip install --quiet --require-hashes -r requirements/runtime.lock.txt
COPY pyproject.toml README.md ./
COPY app ./app
RUN pip install --quiet --no-deps .

RUN mkdir -p var && chown foundry var   # the embedded records database (var/foundry.db) when no FOUNDRY_DATABASE_URL

USER foundry
EXPOSE 8000
HEALTHCHECK --interval=15s --timeout=3s --start-period=5s --retries=3 \
  CMD python -c "import urllib.request,sys; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=2).status == 200 else 1)"
# SIGTERM drains (app/lifecycle.py): running streams get FOUNDRY_SHUTDOWN_GRACE_SECONDS, the cut ones
# 2 s for their finals, then the server closes within 5 s. Set FOUNDRY_STOP_GRACE_SECONDS to the
# orchestrator's stop grace and the drain grace is fitted into it (compose does).
STOPSIGNAL SIGTERM
CMD ["foundry-gateway", "serve", "--host", "0.0.0.0", "--port", "8000"]
