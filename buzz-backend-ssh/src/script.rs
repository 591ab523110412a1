//! The scripts the SSH binding runs on the host (issue 51 items 2 and 3),
//! generated here and piped to `sh -s` on ssh's stdin, so the key, the
//! auth tag and the secret env travel only inside the script's quoted
//! here-documents: never in an argument of ssh, of `sh`, or of any command
//! on either side, never in the unit file, never on a terminal. Pure: the
//! text of each script from plain data.
//!
//! Every value substituted into a script is of a plain character set: the
//! instance (a slug and hex), hex digests and keys, and the working
//! directory ([`crate::config::is_remote_dir`]). The env file and the unit
//! go through here-documents whose delimiter no line of theirs can equal
//! (every env line starts with `KEY=`).
//!
//! Each script says how it ended on its last stdout line, `buzz-ssh: …`
//! ([`crate::outcome`]), and exits 0 with it; a script that did not get so
//! far (a lost connection, a killed shell) has no such line.
//!
//! **deploy**, in order: the host's checks (systemd, the user's manager,
//! lingering, the architecture, the harness's digest: a missing or
//! different harness ends it with `need-harness`, and the provider installs
//! it and runs the script again); the agent's lock (`flock`, so two deploys
//! of one key take turns: I4); every other instance of the key stopped and
//! removed (a rename); the new env file, template and harness digest
//! compared with the running ones: all equal and the unit active is a
//! no-op that answers the running run; else stop, write, `daemon-reload`,
//! `enable`, `start`, which returns once the harness sent `READY=1` or
//! failed, and then the termination message says why.
//!
//! **undeploy**: under the same lock, every instance of the key disabled
//! and stopped, its files removed, and unless `keep_workspace` its working
//! directory and its receipts; the template goes with the last agent.

use crate::unit::{CONFIG_DIR, HARNESS_BIN, STATE_DIR, TEMPLATE, unit_name};

/// The word that starts each outcome line.
pub const MARK: &str = "buzz-ssh:";
/// The exit code of a deploy script that needs the harness installed.
pub const EXIT_NEED_HARNESS: i32 = 4;
/// How long a deploy waits for another deploy of the same agent.
pub const LOCK_WAIT_SECS: u64 = 120;

/// What a deploy script writes.
pub struct DeployScript<'a> {
    pub instance: &'a str,
    /// The agent's full public key (hex).
    pub pubkey: &'a str,
    /// `~/…` or absolute.
    pub workdir: &'a str,
    /// The env file's text ([`crate::unit::env_file`]).
    pub env: &'a str,
    /// The run file's text ([`crate::unit::run_file`]).
    pub run: &'a str,
    /// The template unit's text ([`crate::unit::template`]).
    pub template: &'a str,
    /// The harness binary's SHA-256 (hex) the host must have.
    pub harness_digest: &'a str,
    /// `uname -m` of a host the harness runs on.
    pub arch: &'a str,
}

/// `~/x` as the shell's `"$HOME/x"`; an absolute path as itself. The
/// caller has checked the path's characters.
pub fn shell_dir(dir: &str) -> String {
    match dir.strip_prefix("~/") {
        Some(rest) => format!("\"$HOME/{rest}\""),
        None => format!("'{dir}'"),
    }
}

/// The checks every script starts with, the lock of the agent's key, and
/// the helpers.
fn prelude(key12: &str) -> String {
    format!(
        r#"set -u
umask 077
say() {{ printf '{MARK} %s\n' "$*"; }}
fail() {{ say "error $*"; exit 0; }}
cd "$HOME" 2>/dev/null || fail home "the login's home directory $HOME is missing"
case "$HOME" in *[!A-Za-z0-9._/+@-]*) fail home "the login's home directory has characters the env file cannot carry";; esac
command -v systemctl >/dev/null 2>&1 || fail no-systemd "systemctl is not installed: the host needs systemd"
command -v flock >/dev/null 2>&1 || fail no-flock "flock is not installed (util-linux)"
systemctl --user show-environment >/dev/null 2>&1 || fail no-user-manager "the login has no systemd --user manager"
me=$(id -un)
[ "$(loginctl show-user "$me" --property=Linger --value 2>/dev/null)" = yes ] || fail no-linger "$me"
d="$HOME/{CONFIG_DIR}"
s="$HOME/{STATE_DIR}"
mkdir -p "$d" "$s" "$HOME/.config/systemd/user" 2>/dev/null || fail disk "could not create $d"
exec 9>>"$d/{key12}.lock" || fail disk "could not create the lock file in $d"
flock -w {LOCK_WAIT_SECS} 9 || fail busy "another deploy or undeploy of this agent held its lock for {LOCK_WAIT_SECS} s"
"#
    )
}

/// The deploy script.
pub fn deploy(p: &DeployScript<'_>) -> String {
    let key12 = crate::unit::key12(p.pubkey);
    let i = p.instance;
    let unit = unit_name(i);
    let workdir = shell_dir(p.workdir);
    format!(
        r#"{prelude}[ "$(uname -m)" = '{arch}' ] || fail arch "$(uname -m)"
have=$(sha256sum "$HOME/{HARNESS_BIN}" 2>/dev/null | cut -d' ' -f1)
[ "$have" = '{digest}' ] || {{ say need-harness; exit {need}; }}
w={workdir}
mkdir -p "$w" 2>/dev/null || fail disk "could not create the working directory $w"
for f in "$d"/*-{key12}.env; do
  [ -e "$f" ] || continue
  other=$(basename "$f" .env)
  [ "$other" = '{i}' ] && continue
  systemctl --user disable --now "buzz-acp@$other.service" >/dev/null 2>&1
  ow=$(cat "$d/$other.workdir" 2>/dev/null)
  rm -f "$d/$other.env" "$d/$other.run" "$d/$other.harness" "$d/$other.workdir" "$s/$other.termination"
  if [ -n "$ow" ] && [ "$ow" != "$w" ]; then
    say "replaced $other (its working directory $ow is kept)"
  else
    say "replaced $other"
  fi
done
cat >"$d/.{i}.env.new" <<'BUZZ_SSH_ENV_END' || fail disk "could not write the env file in $d"
{env}BUZZ_SSH_ENV_END
printf 'BUZZ_ACP_CWD="%s"\nBUZZ_ACP_TERMINATION_LOG="%s"\n' "$w" "$s/{i}.termination" >>"$d/.{i}.env.new" || fail disk "could not write the env file in $d"
cat >"$d/.template.new" <<'BUZZ_SSH_UNIT_END' || fail disk "could not write the unit in $d"
{template}BUZZ_SSH_UNIT_END
u="$HOME/.config/systemd/user/{TEMPLATE}"
if cmp -s "$d/.{i}.env.new" "$d/{i}.env" && cmp -s "$d/.template.new" "$u" \
   && [ "$(cat "$d/{i}.harness" 2>/dev/null)" = '{digest}' ] \
   && systemctl --user is-active --quiet '{unit}'; then
  rm -f "$d/.{i}.env.new" "$d/.template.new"
  say "ok unchanged $(sed -n 's/^BUZZ_MANAGED_AGENT_START_NONCE=//p' "$d/{i}.run")"
  exit 0
fi
systemctl --user stop '{unit}' >/dev/null 2>&1
mv -f "$d/.{i}.env.new" "$d/{i}.env" && mv -f "$d/.template.new" "$u" || fail disk "could not move the new files into place"
printf '%s' '{run}' >"$d/{i}.run" && printf '%s\n' '{digest}' >"$d/{i}.harness" && printf '%s\n' "$w" >"$d/{i}.workdir" || fail disk "could not write the run files in $d"
: >"$s/{i}.termination" || fail disk "could not write in $s"
systemctl --user daemon-reload >/dev/null 2>&1 || fail systemd "systemctl --user daemon-reload failed"
systemctl --user enable '{unit}' >/dev/null 2>&1 || fail systemd "systemctl --user enable failed"
if systemctl --user start '{unit}' >/dev/null 2>&1; then
  say "ok started"
  exit 0
fi
code=$(systemctl --user show '{unit}' --property=ExecMainStatus --value 2>/dev/null)
why=$(head -c 2000 "$s/{i}.termination" 2>/dev/null | tr '\n' ' ')
systemctl --user disable --now '{unit}' >/dev/null 2>&1
fail start-failed "exit=${{code:-?}} $why"
"#,
        prelude = prelude(key12),
        arch = p.arch,
        digest = p.harness_digest,
        need = EXIT_NEED_HARNESS,
        env = p.env,
        template = p.template,
        run = p.run.trim_end(),
    )
}

/// The install script's command line: the harness arrives on stdin and
/// becomes `~/.local/bin/buzz-acp` only when its digest matches. No
/// secret: this one is an argument of ssh.
pub fn install(digest: &str) -> String {
    format!(
        r#"umask 022; say() {{ printf '{MARK} %s\n' "$*"; }}; b="$HOME/.local/bin"; mkdir -p "$b" 2>/dev/null || {{ say "error disk could not create $b"; exit 0; }}; t="$b/.buzz-acp.$$"; if ! cat >"$t"; then rm -f "$t"; say "error disk could not write the harness into $b"; exit 0; fi; chmod 0755 "$t"; have=$(sha256sum "$t" | cut -d' ' -f1); if [ "$have" != '{digest}' ]; then rm -f "$t"; say "error transfer the harness arrived damaged"; exit 0; fi; mv -f "$t" "$b/buzz-acp" && say "ok installed""#
    )
}

/// The undeploy script.
pub fn undeploy(pubkey: &str, keep_workspace: bool) -> String {
    let key12 = crate::unit::key12(pubkey);
    format!(
        r#"{prelude}units=0; env_files=0; workspaces=0
for f in "$d"/*-{key12}.env; do
  [ -e "$f" ] || continue
  i=$(basename "$f" .env)
  systemctl --user disable --now "buzz-acp@$i.service" >/dev/null 2>&1
  units=$((units + 1))
  w=$(cat "$d/$i.workdir" 2>/dev/null)
  rm -f "$d/$i.env" && env_files=$((env_files + 1))
  rm -f "$d/$i.run" "$d/$i.harness" "$d/$i.workdir" "$s/$i.termination"
  if [ {keep} = 0 ] && [ -n "$w" ] && [ "$w" != "$HOME" ] && [ -d "$w" ]; then
    rm -rf "$w" && workspaces=$((workspaces + 1))
  fi
done
[ {keep} = 0 ] && rm -rf "$s/{pubkey}"
rm -f "$d/{key12}.lock"
if ! ls "$d"/*.env >/dev/null 2>&1; then
  rm -f "$HOME/.config/systemd/user/{TEMPLATE}"
fi
systemctl --user daemon-reload >/dev/null 2>&1
say "ok removed units=$units env_files=$env_files workspaces=$workspaces"
"#,
        prelude = prelude(key12),
        keep = u8::from(keep_workspace),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample<'a>(env: &'a str) -> DeployScript<'a> {
        DeployScript {
            instance: "bot-0123456789ab",
            pubkey: "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
            workdir: "~/buzz-agents/bot-0123456789ab",
            env,
            run: "BUZZ_MANAGED_AGENT_START_NONCE=00ff\n",
            template: "[Unit]\n",
            harness_digest: "ab12",
            arch: "x86_64",
        }
    }

    #[test]
    fn the_secrets_are_inside_a_quoted_here_document_only() {
        let env = "BUZZ_PRIVATE_KEY=\"nsec1canary\"\n";
        let s = deploy(&sample(env));
        let at = s.find("nsec1canary").unwrap();
        let open = s.find("<<'BUZZ_SSH_ENV_END'").unwrap();
        let close = s.find("\nBUZZ_SSH_ENV_END\n").unwrap();
        assert!(open < at && at < close, "{s}");
        assert_eq!(s.matches("nsec1canary").count(), 1);
    }

    #[test]
    fn the_working_directory_is_quoted_for_the_shell() {
        assert_eq!(shell_dir("~/a/b"), "\"$HOME/a/b\"");
        assert_eq!(shell_dir("/srv/a"), "'/srv/a'");
        let s = deploy(&sample(""));
        assert!(s.contains("w=\"$HOME/buzz-agents/bot-0123456789ab\"\n"), "{s}");
    }

    #[test]
    fn undeploy_keeps_the_workspace_only_when_asked() {
        assert!(undeploy(&"ab".repeat(32), false).contains("[ 0 = 0 ]"));
        assert!(undeploy(&"ab".repeat(32), true).contains("[ 1 = 0 ]"));
    }
}
