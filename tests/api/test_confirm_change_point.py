"""POST /api/v1/findings/{id}/confirm: a slower_since finding's commits screened base against head."""

from __future__ import annotations

import random

from services.models import Finding
from tests.support import branch_history
from tests.web.sample_data import store_handoff_job


def test_the_api_confirms_with_one_post_too(sqlite_api):
    rng = random.Random(24)
    with sqlite_api.session_factory() as session:
        for n in range(branch_history.STEP_AT + 4):
            branch_history.push(session, sqlite_api.settings, rng, n)
        session.commit()
        finding_id = session.query(Finding).filter_by(kind="slower_since").one().id
        other = store_handoff_job(session, sqlite_api.settings, project="shop").findings[0].id
        session.commit()
    token = sqlite_api.new_token("shop")
    created = sqlite_api.client.post(
        f"/api/v1/findings/{finding_id}/confirm", headers={"Authorization": f"Bearer {token}"}
    )
    assert created.status_code == 201, created.get_json()
    job = created.get_json()
    assert job["trigger"] == "confirm"
    assert job["repository"]["commit"] == branch_history.commit(branch_history.STEP_AT)
    # Only a change point names two commits to compare.
    refused = sqlite_api.client.post(f"/api/v1/findings/{other}/confirm", headers={"Authorization": f"Bearer {token}"})
    assert refused.status_code == 422, refused.get_json()
