"""The stability rule and the re-measure decision, on synthetic timings (no clock, no torch, no Ray).

The statistic judged is a configuration's fastest step: load only ever adds time to the others."""

import pytest

from tasks.measure.stability import StabilityRule, inliers, interleave_until_stable, judge, remeasure

RULE = StabilityRule(max_drift=0.10, max_excess=0.12, remeasure=2)
MS = 1e-3


def _rounds(*rounds):
    return [[t * MS for t in r] for r in rounds]


def test_steady_rounds_are_stable_and_their_statistics_are_of_the_samples():
    verdict = judge(_rounds([40, 41, 40, 42], [41, 40, 42, 40], [40, 41, 41, 40]), RULE)
    assert verdict.stable and verdict.reason is None
    assert verdict.rejected == 0 and verdict.kept == 12
    assert verdict.fastest_s == pytest.approx(40 * MS) and verdict.median_s == pytest.approx(40.5 * MS)
    assert verdict.spread < 0.05 and verdict.drift == 0.0


def test_the_statistic_is_the_fastest_step_which_a_load_on_half_the_steps_leaves_alone():
    # Another process held the core during half the steps, in every round: the other half ran
    # free, and their fastest is the layer's own time. The spread describes the load; it is no verdict.
    verdict = judge(_rounds([40, 90, 41, 88], [90, 40, 89, 41], [41, 90, 40, 91]), RULE)
    assert verdict.stable and verdict.fastest_s == pytest.approx(40 * MS)
    assert verdict.spread > 1.0 and verdict.median_s > 1.5 * verdict.fastest_s
    assert verdict.drift == 0.0  # every round found 40 ms


def test_one_descheduled_step_moves_neither_the_statistic_nor_the_verdict():
    verdict = judge(_rounds([40, 41, 40, 42], [41, 300, 42, 40], [40, 41, 41, 40]), RULE)
    assert verdict.rejected == 1 and verdict.stable
    assert verdict.p90_s < 43 * MS and verdict.fastest_s == pytest.approx(40 * MS)


def test_a_load_over_one_round_leaves_the_fastest_step_reproduced_by_the_others():
    # The third round ran under a load, 20% slower; the first two agree on 40 ms, which stands.
    verdict = judge(_rounds([40, 40, 41, 40], [40, 41, 40, 40], [48, 48, 49, 48]), RULE)
    assert verdict.stable and verdict.drift == 0.0 and verdict.fastest_s == pytest.approx(40 * MS)


def test_a_fastest_step_that_no_other_round_reproduces_is_unstable():
    # Only the first round found 40 ms: a spell of quiet not seen again, or a load that came to stay.
    verdict = judge(_rounds([40, 40, 41, 40], [46, 46, 47, 46], [52, 52, 52, 53]), RULE)
    assert verdict.drift == pytest.approx(0.15)
    assert not verdict.stable and verdict.reason == ("fastest step not reproduced: "
                                                     "the next round's fastest 15% slower > 10%")


def test_a_load_over_most_rounds_is_unstable_though_the_slow_samples_are_the_majority():
    verdict = judge(_rounds([40, 40, 41, 40], [120, 121, 120, 120], [120, 120, 122, 120]), RULE)
    assert not verdict.stable and "next round's fastest 200% slower" in verdict.reason


def test_a_single_round_has_nothing_to_reproduce_it():
    assert judge(_rounds([40, 41, 40]), RULE).drift == 0.0


def test_steps_slowed_evenly_are_unstable_by_their_excess_over_the_floor():
    # A busy host: steady, every round alike, but every step 20% above the sum of its fastest parts.
    rounds = _rounds([48, 48, 49, 48], [48, 49, 48, 48], [48, 48, 48, 49])
    assert judge(rounds, RULE).stable  # without a floor there is nothing to compare with
    slowed = judge(rounds, RULE, floor_s=40 * MS)
    assert slowed.excess == pytest.approx(0.2) and not slowed.stable
    assert slowed.reason == "fastest step 20% above the sum of its fastest parts > 12%"
    assert judge(rounds, RULE, floor_s=45 * MS).stable  # 6.7%


def test_the_excess_is_of_the_fastest_step_not_of_a_quantile():
    # Half the steps under load: the fastest is 2.5% above its parts, the p10 far more.
    verdict = judge(_rounds([41, 90, 41, 88], [90, 41, 89, 41], [41, 90, 41, 91]), RULE, floor_s=40 * MS)
    assert verdict.excess == pytest.approx(0.025) and verdict.stable


def test_the_thresholds_are_the_rules():
    rounds = _rounds([40, 40, 40, 40], [46, 46, 46, 46], [48, 48, 48, 48])
    assert not judge(rounds, RULE).stable
    assert judge(rounds, StabilityRule(max_drift=0.25)).stable


def test_inliers_keep_everything_when_the_samples_agree_exactly():
    assert inliers([1.0, 1.0, 1.0, 5.0], 3.5).all()  # MAD 0: no scale to call anything an outlier
    assert list(inliers([1.0, 1.1, 0.9, 1.0, 5.0], 3.5)) == [True, True, True, True, False]


def test_remeasure_only_unstable_measurements_a_bounded_number_of_times_within_the_time_cap():
    stable = judge(_rounds([40, 40], [40, 40]), RULE)
    unstable = judge(_rounds([40, 40], [60, 60]), RULE)
    assert not remeasure(stable, 1, RULE, elapsed_s=0.0, time_cap_s=10.0)
    assert remeasure(unstable, 1, RULE, elapsed_s=0.0, time_cap_s=10.0)
    assert remeasure(unstable, 2, RULE, elapsed_s=0.0, time_cap_s=10.0)
    assert not remeasure(unstable, 3, RULE, elapsed_s=0.0, time_cap_s=10.0)  # 1 + remeasure=2 made
    assert not remeasure(unstable, 1, RULE, elapsed_s=10.0, time_cap_s=10.0)  # the cap is spent


class _Machine:
    """Synthetic configurations on a synthetic machine: configuration i's step lasts
    ``base_ms[i]`` times the load of the moment; the clock advances 1 s per visit."""

    def __init__(self, base_ms, load=lambda visit: 1.0, jitter=(0.0, 0.01, 0.02, 0.01)):
        self.base_ms, self.load, self.jitter = base_ms, load, jitter
        self.visits, self.now, self.pauses = [], 0.0, []

    def visit(self, i, r):
        self.visits.append((i, r))
        self.now += 1.0
        slowdown = self.load(len(self.visits) - 1)
        return [self.base_ms[i] * MS * slowdown * (1 + j) for j in self.jitter]

    def clock(self):
        return self.now

    def sleep(self, seconds):
        self.pauses.append(seconds)

    def run(self, rule=RULE, time_cap_s=100.0, rounds=3):
        return interleave_until_stable(len(self.base_ms), self.visit, rule, rounds=rounds, time_cap_s=time_cap_s,
                                       pause_s=0.5, clock=self.clock, sleep=self.sleep)


def test_rounds_visit_every_configuration_in_turn_and_a_quiet_machine_is_measured_once():
    machine = _Machine([40, 100, 10])
    verdicts = machine.run()
    assert machine.visits == [(0, 0), (1, 0), (2, 0), (0, 1), (1, 1), (2, 1), (0, 2), (1, 2), (2, 2)]
    assert [len(v) for v in verdicts] == [1, 1, 1] and all(v[0].stable for v in verdicts)
    assert [v[0].fastest_s for v in verdicts] == pytest.approx([40 * MS, 100 * MS, 10 * MS], rel=0.01)
    assert machine.pauses == []


def test_a_spell_of_load_over_one_round_is_outvoted_by_the_other_rounds():
    # A 3x load during visits 3 and 4 (round 1 of configurations 0 and 1): rounds 0 and 2 agree.
    machine = _Machine([40, 100, 10], load=lambda visit: 3.0 if visit in (3, 4) else 1.0)
    verdicts = machine.run()
    assert [len(v) for v in verdicts] == [1, 1, 1] and all(v[0].stable for v in verdicts)
    assert [v[0].fastest_s for v in verdicts] == pytest.approx([40 * MS, 100 * MS, 10 * MS])


def test_a_spell_over_two_rounds_is_measured_again_and_the_new_rounds_join_the_first():
    # A 3x load on rounds 1 and 2 of configurations 0 and 1: only round 0 found their time.
    machine = _Machine([40, 100, 10], load=lambda visit: 3.0 if visit in (3, 4, 6, 7) else 1.0)
    verdicts = machine.run()
    assert [len(v) for v in verdicts] == [2, 2, 1]
    assert not verdicts[0][0].stable and "fastest step not reproduced" in verdicts[0][0].reason
    assert machine.visits[9:] == [(0, 0), (1, 0), (0, 1), (1, 1), (0, 2), (1, 2)]  # the two, interleaved again
    assert machine.pauses == [0.5]
    again = verdicts[0][1]
    assert again.stable and again.kept + again.rejected == 24  # judged on all six rounds
    assert again.fastest_s == pytest.approx(40 * MS)


def test_a_machine_that_keeps_slowing_never_reproduces_its_fastest_step_and_stops_after_the_bound():
    machine = _Machine([40, 100], load=lambda visit: 1.0 + 0.5 * visit)  # every round slower than the last
    verdicts = machine.run()
    assert [len(v) for v in verdicts] == [1 + RULE.remeasure] * 2
    assert not any(v.stable for vs in verdicts for v in vs)
    assert [vs[-1].fastest_s for vs in verdicts] == pytest.approx([40 * MS, 150 * MS])


def test_the_time_cap_counts_each_configurations_own_visits():
    machine = _Machine([40, 100], load=lambda visit: 1.0 + (visit % 3))
    verdicts = machine.run(time_cap_s=3.0)  # one measurement is 3 visits of 1 s: the cap is spent
    assert [len(v) for v in verdicts] == [1, 1]


def test_the_whole_stops_at_its_time_cap_per_configuration_and_what_it_cut_short_is_unstable():
    machine = _Machine([40, 100, 10])
    verdicts = machine.run(time_cap_s=2.0)  # 6 s for three configurations, 1 s a visit
    assert len(machine.visits) == 7 and machine.visits[-1] == (0, 2)
    assert verdicts[0][0].stable and len(verdicts[0]) == 1
    for cut in (verdicts[1], verdicts[2]):
        assert len(cut) == 1 and not cut[0].stable
        assert cut[0].reason == "2 of 3 rounds measured before the time cap of the whole (6 s) ran out"


def test_a_configuration_the_time_cap_never_reached_has_no_verdict():
    machine = _Machine([40, 100, 10])
    verdicts = machine.run(time_cap_s=0.5)
    assert machine.visits == [(0, 0), (1, 0)] and verdicts[2] == []
    assert not verdicts[0][0].stable and "1 of 3 rounds" in verdicts[0][0].reason


def test_each_configuration_is_judged_against_its_own_floor():
    machine = _Machine([40, 100])
    floors = {0: 39 * MS, 1: 80 * MS}
    verdicts = interleave_until_stable(2, machine.visit, RULE, rounds=3, time_cap_s=100.0, floor=floors.get,
                                       clock=machine.clock, sleep=machine.sleep)
    assert [len(v) for v in verdicts] == [1, 1 + RULE.remeasure]
    assert verdicts[0][0].stable and "above the sum of its fastest parts" in verdicts[1][-1].reason


def test_a_configuration_whose_visit_fails_is_measured_no_more():
    machine = _Machine([40, 100])
    visit = machine.visit
    machine.visit = lambda i, r: None if (i, r) == (1, 1) else visit(i, r)
    verdicts = machine.run()
    assert verdicts[1] == [] and len(verdicts[0]) == 1
    assert (1, 2) not in machine.visits


def test_a_rule_with_a_non_positive_threshold_is_refused():
    with pytest.raises(ValueError, match="positive"):
        StabilityRule(max_drift=0.0)
