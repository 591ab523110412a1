use super::*;

fn hex(c: char) -> String {
    c.to_string().repeat(64)
}

fn gate(mode: RespondTo) -> Gate {
    Gate {
        agent: hex('a'),
        owner: hex('0'),
        respond_to: mode,
        allowlist: vec![hex('1')],
        channels: vec![],
    }
}

fn mention(author: char, content: &str, at: u64) -> Mention {
    Mention {
        id: format!("{at:064x}"),
        author: hex(author),
        kind: 9,
        content: content.into(),
        addressed: vec![hex('a')],
        channel: Some("c1".into()),
        created_at: at,
    }
}

fn known(started: u64) -> Known {
    Known {
        started_at: Some(started),
        ..Known::default()
    }
}

#[test]
fn one_rest_per_table_row() {
    let idle = Ended::Stopped(StopReason::Idle, 150);
    assert_eq!(
        rest(&Known {
            live: true,
            ..known(100)
        }),
        Rest::Running
    );
    assert_eq!(rest(&Known::default()), Rest::NotStarted);
    let stopped = Known {
        stopped_at: Some(120),
        ended: Some(idle),
        ..known(100)
    };
    assert_eq!(
        rest(&stopped),
        Rest::StoppedByOwner,
        "an owner stop beats the idle end"
    );
    for r in [StopReason::Owner, StopReason::Signal] {
        let k = Known {
            ended: Some(Ended::Stopped(r, 150)),
            ..known(100)
        };
        assert_eq!(rest(&k), Rest::Stopped(r));
        assert_eq!(rest(&k).asleep_since(), None, "{r:?} never wakes");
    }
    let asleep = Known {
        ended: Some(idle),
        ..known(100)
    };
    assert_eq!(rest(&asleep), Rest::Sleeping { since: 150 });
    assert_eq!(rest(&asleep).asleep_since(), Some(150));
    let failed = Known {
        ended: Some(Ended::Failed),
        ..known(100)
    };
    assert_eq!(rest(&failed), Rest::Failed);
    let unseen = Known {
        deployed: true,
        ..known(100)
    };
    assert_eq!(rest(&unseen), Rest::SleepingUnseen { since: 100 });
    assert_eq!(rest(&known(100)), Rest::Unknown);
    // A stop before this start is the previous run's: this one sleeps.
    let old_stop = Known {
        stopped_at: Some(90),
        ended: Some(idle),
        ..known(100)
    };
    assert_eq!(rest(&old_stop), Rest::Sleeping { since: 150 });
}

#[test]
fn only_a_gated_fresh_mention_that_is_no_command_wakes() {
    let now = 10_000;
    let g = gate(RespondTo::OwnerOnly);
    assert_eq!(wakes_for(&g, 9_000, now, &mention('0', "hello", 9_500)), Ok(()));
    assert_eq!(
        wakes_for(&g, 9_000, now, &mention('5', "hello", 9_500)),
        Err(NoWake::Gated),
        "a stranger does not wake an owner-only agent"
    );
    assert_eq!(
        wakes_for(&g, 9_000, now, &mention('0', "hello", 8_999)),
        Err(NoWake::TooOld),
        "sent before it slept"
    );
    assert_eq!(
        wakes_for(&g, 0, now, &mention('0', "hello", now - WINDOW.as_secs() - 1)),
        Err(NoWake::TooOld),
        "older than the window"
    );
    for c in ["!shutdown", " !cancel", "!allow 1a2b", "!deny 1a2b"] {
        assert_eq!(
            wakes_for(&g, 9_000, now, &mention('0', c, 9_500)),
            Err(NoWake::Command),
            "{c}"
        );
    }
    let mut not_mine = mention('0', "hello", 9_500);
    not_mine.addressed = vec![hex('b')];
    assert_eq!(wakes_for(&g, 9_000, now, &not_mine), Err(NoWake::NotAMention));
    let mut own = mention('a', "hello", 9_500);
    own.author = hex('a');
    assert_eq!(wakes_for(&g, 9_000, now, &own), Err(NoWake::NotAMention));
    let a = gate(RespondTo::Allowlist);
    assert_eq!(wakes_for(&a, 9_000, now, &mention('1', "hi", 9_500)), Ok(()));
    assert_eq!(
        wakes_for(
            &gate(RespondTo::Anyone),
            9_000,
            now,
            &mention('5', "!shutdown", 9_500)
        ),
        Ok(()),
        "a stranger's !shutdown is an ordinary message where anyone is answered"
    );
}

#[test]
fn an_owner_shutdown_on_the_relay_keeps_an_unseen_agent_stopped() {
    let g = gate(RespondTo::OwnerOnly);
    let ms = vec![mention('0', "hello", 150), mention('5', "!shutdown", 160)];
    assert!(
        !owner_stopped(&g, 100, &ms),
        "a stranger's !shutdown stops nothing"
    );
    let ms = vec![mention('0', " !shutdown ", 160)];
    assert!(owner_stopped(&g, 100, &ms));
    assert!(
        !owner_stopped(&g, 161, &ms),
        "before the start: the previous run's"
    );
}

#[test]
fn the_hand_over_is_oldest_first_once_each_and_bounded() {
    let ms = vec![
        mention('0', "b", 20),
        mention('0', "a", 10),
        mention('0', "a", 10),
    ];
    assert_eq!(
        to_hand_over(ms),
        vec![format!("{:064x}", 10), format!("{:064x}", 20)]
    );
    let many: Vec<Mention> = (0..100).map(|i| mention('0', "m", 1_000 + i)).collect();
    let ids = to_hand_over(many);
    assert_eq!(ids.len(), buzz_contract::wake::MAX_EVENTS);
    assert_eq!(ids.last(), Some(&format!("{:064x}", 1_099)), "the newest kept");
}

#[test]
fn the_budget_spaces_wakes_caps_the_hour_and_backs_off_on_failure() {
    let mut b = Budget::default();
    assert_eq!(b.check(1_000), Ok(()));
    b.record(1_000, true);
    assert_eq!(b.check(1_010), Err(Refused::TooSoon { until: 1_030 }));
    assert_eq!(b.check(1_030), Ok(()));
    let mut t = 1_000;
    for _ in 1..PER_HOUR {
        t += 60;
        b.record(t, true);
    }
    assert_eq!(b.check(t + 60), Err(Refused::HourFull { until: 1_000 + 3600 }));
    assert_eq!(b.check(1_000 + 3600), Ok(()));

    let mut f = Budget::default();
    f.record(0, false);
    assert_eq!(
        f.check(59),
        Err(Refused::TooSoon { until: 60 }),
        "one failure: twice the gap"
    );
    f.record(60, false);
    assert_eq!(f.check(60 + 119), Err(Refused::TooSoon { until: 180 }));
    for i in 0..20 {
        f.record(10_000 * (i + 1), false);
    }
    assert_eq!(
        f.check(200_000),
        Err(Refused::TooSoon {
            until: 200_000 + MAX_BACKOFF.as_secs()
        }),
        "never beyond the cap"
    );
    f.record(300_000, true);
    assert_eq!(f.check(300_030), Ok(()), "a success resets the backoff");
}

#[test]
fn the_inactivity_bound_is_the_record_s_else_short_while_a_waker_runs() {
    assert_eq!(inactivity(Some(0), true), Some(0), "0 stays no bound");
    assert_eq!(inactivity(Some(42), false), Some(42));
    assert_eq!(inactivity(None, true), Some(DEFAULT_INACTIVITY_WITH_WAKER));
    assert_eq!(inactivity(None, false), None);
}

#[test]
fn the_doze_bound_is_the_record_s_else_five_minutes() {
    assert_eq!(doze(None), DEFAULT_DOZE);
    assert_eq!(DEFAULT_DOZE, 300);
    assert_eq!(doze(Some(0)), 0, "0 stays no doze");
    assert_eq!(doze(Some(42)), 42);
}

#[test]
fn the_wake_gate_is_the_harness_s_own_commands_and_channel_scope() {
    let g = gate(RespondTo::OwnerOnly);
    // "!shutdown now" is a message to the harness: it wakes, as it is answered.
    assert_eq!(
        wakes_for(&g, 100, 200, &mention('0', "!shutdown now", 150)),
        Ok(())
    );
    assert_eq!(
        wakes_for(&g, 100, 200, &mention('0', "!shutdown", 150)),
        Err(NoWake::Command)
    );
    let scoped = Gate {
        channels: vec!["c2".into()],
        ..gate(RespondTo::OwnerOnly)
    };
    assert_eq!(
        wakes_for(&scoped, 100, 200, &mention('0', "hi", 150)),
        Err(NoWake::OtherChannel)
    );
    let mut in_scope = mention('0', "hi", 150);
    in_scope.channel = Some("c2".into());
    assert_eq!(wakes_for(&scoped, 100, 200, &in_scope), Ok(()));
}
