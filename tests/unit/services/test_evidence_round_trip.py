"""What the database keeps of evidence (services/evidence.py dump) reads back as it was:
dump leaves out None fields, so every field that may be None has a default."""

from services import evidence
from services.evidence import AsyncioLoopContent, DurationBucket, EvidenceKind


def test_a_blocked_loops_last_bucket_reads_back_after_storing():
    # The last bucket (everything longer) has no upper bound: stored without one.
    buckets = [
        DurationBucket(upper_s=0.02, count=118, total_s=1.8),
        DurationBucket(upper_s=None, count=2, total_s=0.05),
    ]
    content = AsyncioLoopContent.model_validate(
        {"status": "ok", "threshold_s": 0.02, "wall_s": 3.2, "durations": [b.model_dump() for b in buckets]}
    )
    stored = evidence.dump(content)
    assert "upper_s" not in stored["durations"][1]
    again = evidence.parse(EvidenceKind.asyncio_loop, stored)
    assert isinstance(again, AsyncioLoopContent)
    assert again.durations == buckets


def test_every_optional_field_of_every_kind_has_a_default():
    # dump(exclude_none) drops them: a required Optional would not parse back.
    def walk(model, seen):
        if model in seen:
            return
        seen.add(model)
        for name, field in model.model_fields.items():
            annotation = field.annotation
            assert not (field.is_required() and type(None) in getattr(annotation, "__args__", ())), (model, name)
            for arg in getattr(annotation, "__args__", (annotation,)):
                for inner in getattr(arg, "__args__", (arg,)):
                    if isinstance(inner, type) and hasattr(inner, "model_fields"):
                        walk(inner, seen)

    seen: set = set()
    for kind in EvidenceKind:
        if kind in evidence.CONTENT:
            walk(evidence.content_model(kind), seen)
