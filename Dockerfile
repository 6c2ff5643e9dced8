# ftrl-ps: one image for every role (gen, server, worker, export, serve).
#   docker build -t ftrl-ps .
#   docker run --rm -e FTRL_PS_TOKEN=secret -p 7000:7000 ftrl-ps        # one shard
#   docker run --rm ftrl-ps python -m services.worker --help
# Every role is configured by FTRL_PS_* environment variables (docs/deployment.md).
FROM python:3.11-slim

ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONPATH=/app \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    NUMBA_CACHE_DIR=/var/cache/numba

# Non-root user (uid 10001). Every path a role writes on a volume exists here,
# owned by it: Docker initialises a fresh named volume from the image's directory
# (owner and mode included), and one the image lacks starts root-owned, which uid
# 10001 cannot write. docker-compose.yml mounts /data (gen), /models (export),
# /checkpoints (servers) and /state (workers); tools/deploycheck checks the list.
# (Kubernetes PVCs get the same from the pods' securityContext.fsGroup.)
RUN useradd --create-home --uid 10001 --user-group app \
 && mkdir -p /app /data /models /checkpoints /state /var/cache/numba \
 && chown app:app /data /models /checkpoints /state /var/cache/numba

WORKDIR /app

# Dependencies first, at the versions pinned in requirements/lock.txt (made from
# pyproject.toml by scripts/lock.sh, docs/lockfile.md): this layer is rebuilt
# only when the lock or pyproject.toml changes, not when the source does.
COPY pyproject.toml ./
COPY requirements/lock.txt ./requirements/lock.txt
RUN pip install -r requirements/lock.txt

# The source (found through PYTHONPATH=/app; no install step needed).
COPY ftrl_ps ./ftrl_ps
COPY services ./services
# Bytecode compiled once here: PYTHONDONTWRITEBYTECODE (above) would otherwise
# make every process of a container compile the package's sources again
RUN python -m compileall -q ftrl_ps services

USER app

# Compile the numba kernels once at build time into NUMBA_CACHE_DIR, so a
# container starts in seconds (a CPU unlike the build machine's recompiles).
RUN python -m ftrl_ps gen /tmp/warm --rows 2000 --test-rows 500 --bits 12 --quiet \
 && python -m ftrl_ps train /tmp/warm/train.svm --test /tmp/warm/test.svm --bits 12 \
        --workers 1 --servers 1 --model /tmp/warm/model.ftrl --quiet \
 && rm -rf /tmp/warm

EXPOSE 7000

# Health of a server container (the default command); other roles disable it.
HEALTHCHECK --interval=5s --timeout=3s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/health' % (os.environ.get('FTRL_PS_PORT') or '7000'), timeout=2)"]

CMD ["python", "-m", "services.server"]
