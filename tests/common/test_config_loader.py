"""broker.conf files and --set pairs land on the right settings, with clear errors."""

from dataclasses import dataclass, field

import pytest

from ferrymq.common.config_loader import LIVE, ConfigError, apply_settings, parse_assignments, parse_properties, to_properties


@dataclass
class A:
    broker_name: str = "broker-a"
    listen_port: int = 10911
    auto_create_topic_enable: bool = True


@dataclass
class B:
    flush_disk_type: str = "ASYNC_FLUSH"
    mapped_file_size_commit_log: int = 1 << 30


def test_properties_file_with_comments_and_both_separators():
    text = "# a comment\n! another\nbrokerName = broker-b\nlistenPort: 30911\n\nflushDiskType=SYNC_FLUSH\n"
    assert parse_properties(text) == {"brokerName": "broker-b", "listenPort": "30911", "flushDiskType": "SYNC_FLUSH"}


def test_rocketmq_keys_apply_to_whichever_dataclass_has_them():
    a, b = A(), B()
    apply_settings({"brokerName": "x", "listenPort": "1234", "autoCreateTopicEnable": "false",
                    "mappedFileSizeCommitLog": "4194304", "flushDiskType": "SYNC_FLUSH"}, a, b)
    assert (a.broker_name, a.listen_port, a.auto_create_topic_enable) == ("x", 1234, False)
    assert (b.flush_disk_type, b.mapped_file_size_commit_log) == ("SYNC_FLUSH", 4194304)


def test_unknown_key_and_bad_values_are_clear_errors():
    with pytest.raises(ConfigError, match="unknown configuration key 'noSuchKey'"):
        apply_settings({"noSuchKey": "1"}, A())
    with pytest.raises(ConfigError, match="listenPort: 'abc' is not a valid int"):
        apply_settings({"listenPort": "abc"}, A())
    with pytest.raises(ConfigError, match="not a valid bool"):
        apply_settings({"autoCreateTopicEnable": "yes"}, A())
    with pytest.raises(ConfigError, match="key=value"):
        parse_assignments(["novalue"])


def test_settings_render_back_as_rocketmq_keys():
    assert to_properties(A()) == {"brokerName": "broker-a", "listenPort": "10911", "autoCreateTopicEnable": "true"}


@dataclass
class Checked:
    ratio: int = field(default=50, metadata=LIVE)
    name: str = "x"

    def __post_init__(self):
        if not 0 <= self.ratio <= 100:
            raise ValueError(f"ratio must be 0..100, got {self.ratio}")


def test_values_go_through_the_constructor_and_a_refused_update_changes_nothing():
    a, c = A(), Checked()
    with pytest.raises(ConfigError, match="ratio must be 0..100, got 150"):
        apply_settings({"brokerName": "changed", "ratio": "150"}, a, c)
    assert (a.broker_name, c.ratio) == ("broker-a", 50)
    apply_settings({"ratio": "70"}, c)
    assert c.ratio == 70


def test_live_only_refuses_keys_not_marked_live_and_lists_those_that_are():
    c = Checked()
    with pytest.raises(ConfigError, match=r"name cannot change on a running broker.*keys that change live: ratio"):
        apply_settings({"name": "y"}, c, live_only=True)
    apply_settings({"ratio": "10"}, c, live_only=True)
    assert (c.name, c.ratio) == ("x", 10)
