. /work/main/.venv/bin/activate; cd /work/wt-currency; export PYTHONPATH=/work/wt-currency FASTEMBED_CACHE_PATH=/work/shared/models/fastembed_cache HF_HUB_OFFLINE=1
