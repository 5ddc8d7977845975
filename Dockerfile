# Foundry Gateway: slim Python, non-root, installed into a virtualenv as `make install` does.
FROM python:3.12-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PATH=/opt/venv/bin:$PATH
RUN python -m venv /opt/venv && useradd --create-home --uid 10001 foundry
WORKDIR /srv/foundry
COPY pyproject.toml README.md ./
COPY app ./app
RUN pip install --quiet --upgrade pip && pip install --quiet .

RUN mkdir -p var && chown foundry var   # the embedded records database (var/foundry.db) when no FOUNDRY_DATABASE_URL

USER foundry
EXPOSE 8000
HEALTHCHECK --interval=15s --timeout=3s --start-period=5s --retries=3 \
  CMD python -c "import urllib.request,sys; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=2).status == 200 else 1)"
# SIGTERM drains (README "Reliability"): FOUNDRY_SHUTDOWN_GRACE_SECONDS (5) for running streams, up to
# 2 s for the cut ones to write their final, then uvicorn closes connections within 10 s. The
# orchestrator's stop grace must exceed the sum (compose: stop_grace_period 20s).
STOPSIGNAL SIGTERM
CMD ["uvicorn", "app.main:app", "--host", "0.0.0.0", "--port", "8000", "--no-access-log", "--timeout-graceful-shutdown", "10"]
