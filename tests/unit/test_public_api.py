import subprocess
import sys

import hivemem


def test_all_is_pinned() -> None:
    assert sorted(hivemem.__all__) == [
        "AsyncMemoryClient",
        "Backpressure",
        "ContextItem",
        "DeadLetter",
        "ExcludedItem",
        "HivememError",
        "MemoryClient",
        "ModelUnavailable",
        "PRESETS",
        "ProcessingTimeout",
        "ProviderError",
        "RecallPolicy",
        "RecallResult",
        "RetryLater",
        "Role",
        "ScoreComponents",
        "ScoringWeights",
        "SessionStats",
        "Settings",
        "StoreUnavailable",
        "Turn",
        "TurnInput",
        "ValidationError",
        "__version__",
    ]
    for name in hivemem.__all__:
        assert hasattr(hivemem, name)


def test_import_loads_no_heavy_dependency() -> None:
    code = (
        "import sys, hivemem\n"
        "heavy = sorted({m.split('.')[0] for m in sys.modules} & "
        "{'rq', 'fastembed', 'qdrant_edge', 'qdrant_client', 'onnxruntime', 'fakeredis'})\n"
        "print(','.join(heavy))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == ""


def test_errors_share_one_root() -> None:
    for name in ("ValidationError", "StoreUnavailable", "ProviderError", "ModelUnavailable",
                 "RetryLater", "ProcessingTimeout", "Backpressure"):
        assert issubclass(getattr(hivemem, name), hivemem.HivememError)
