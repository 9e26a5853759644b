import pytest

from services.measure.executors.local import LocalExecutor
from services.settings import Settings


@pytest.fixture
def executor() -> LocalExecutor:
    return LocalExecutor(Settings())
