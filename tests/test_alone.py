"""The ``alone`` marker's plumbing (tests/conftest.py): the CPU sample and the
bounded wait for an idle machine, with fake samples and a fake clock."""
from __future__ import annotations

import pytest

from conftest import cpu_busy_share, cpu_jiffies, pytest_collection_modifyitems, wait_until_alone


def test_cpu_jiffies_counts_idle_and_iowait_as_not_busy():
    line = "cpu  100 5 50 800 40 3 2 0 7 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n"
    busy, total = cpu_jiffies(line)
    assert total == 100 + 5 + 50 + 800 + 40 + 3 + 2 + 0  # guest is inside user already
    assert busy == total - 800 - 40
    with pytest.raises(ValueError):
        cpu_jiffies("cpu0 1 2 3 4 5 6 7 8\n")


def test_cpu_busy_share_of_this_machine_is_a_share():
    assert 0.0 <= cpu_busy_share(0.05) <= 1.0


class FakeClock:
    def __init__(self, step):
        self.now, self.step = 0.0, step

    def __call__(self):
        return self.now

    def sample(self, values):
        it = iter(values)

        def one():
            self.now += self.step  # a sample takes its time
            return next(it)
        return one


def test_wait_until_alone_runs_at_the_first_idle_sample():
    clock, said = FakeClock(1.0), []
    ok, waited, seen = wait_until_alone(120, 0.25, sample=clock.sample([0.9, 0.6, 0.2, 0.9]),
                                        clock=clock, say=said.append)
    assert ok and seen == [0.9, 0.6, 0.2] and waited == 3.0
    assert len(said) == 1 and "90% busy" in said[0] and "120 s" in said[0]


def test_wait_until_alone_gives_up_after_its_limit():
    clock = FakeClock(1.0)
    ok, waited, seen = wait_until_alone(10, 0.25, sample=clock.sample([0.5] * 100), clock=clock,
                                        say=lambda _m: None)
    assert not ok and waited == 10.0 and len(seen) == 10


def test_idle_at_once_says_nothing():
    clock, said = FakeClock(1.0), []
    assert wait_until_alone(10, 0.25, sample=clock.sample([0.25]), clock=clock,
                            say=said.append)[0]
    assert said == []


class FakeItem:
    def __init__(self, marked, names):
        self.marked, self.fixturenames = marked, list(names)

    def get_closest_marker(self, name):
        return object() if self.marked and name == "alone" else None


def test_marked_tests_get_the_alone_fixture_after_their_own():
    items = [FakeItem(True, ["fabric", "agent"]), FakeItem(False, ["fabric"]),
             FakeItem(True, ["alone", "fabric"])]
    pytest_collection_modifyitems(None, items)
    assert [i.fixturenames for i in items] == [["fabric", "agent", "alone"], ["fabric"],
                                               ["alone", "fabric"]]
