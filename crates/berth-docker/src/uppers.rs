//! Copying a running instance's upper layers under a short freeze: what it wrote since its
//! last layer becomes a new immutable layer, and it keeps running on the overlay it had.
//!
//! Two helpers of the instance's image, made before the freeze. The first mounts, for each
//! overlay, its upper volume (read-only), the fresh upper volume of the new overlay, and the
//! instance's merged view (read-only: the engine's `local` driver mounts a volume once and
//! counts its users, so this is the very mount the instance writes through). Once the instance
//! is frozen, one exec in it runs `cp -a` from each upper layer into the new one and lists,
//! in the merged view, every directory the upper layer holds; the instance is thawed as soon
//! as that exec ends. The second helper then mounts each new overlay (its first mount) and
//! lists the same directories. The copy is faithful when the two listings agree name for
//! name.
//!
//! Why the check: whiteouts are character devices `cp -a` copies (the helper has `MKNOD`),
//! but a directory removed and made again over a lower one is marked opaque, and a renamed one
//! (with `redirect_dir=on`) redirected, by `trusted.overlay.*` extended attributes, which a
//! process without `CAP_SYS_ADMIN` can neither read nor write. A copy without the mark shows
//! the lower directory's files again. Such a copy is answered [`UppersCopied::NotCopied`] and
//! never used. Overlayfs's `metacopy` (an upper file holding only metadata) cannot be seen by
//! a listing: a kernel whose overlayfs makes such files is not copied from at all.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use berth_core::runtime::{RuntimeError, UPPER_DIR, UpperCopyPlan, UppersCopied};
use bollard::Docker;
use bollard::container::LogOutput;
use bollard::exec::StartExecResults;
use bollard::models::{ContainerCreateBody, HostConfig, Mount, MountTmpfsOptions, MountType};
use futures_util::StreamExt;

use crate::copy::{CP_CAPABILITIES, create_fresh, image_volumes, volume_mount};
use crate::error;
use crate::helper_run::run_to_end;
use crate::images::create_reference;

/// Where the helpers mount the volumes of the `i`th pair: `<AT>/<i>/from`, `to`, `merged`.
const AT: &str = "/berth-upper";
/// What a helper runs until its execs are done (a day: it is removed as soon as they are).
const IDLE: [&str; 2] = ["sleep", "86400"];
/// The longest the copy under the freeze may take; the freeze ends then, whatever it did.
const FROZEN_AT_MOST: Duration = Duration::from_secs(600);
/// Where the kernel says whether overlayfs makes metadata-only copies up.
const METACOPY: &str = "/sys/module/overlay/parameters/metacopy";

/// Copies `plan`'s upper layers under one freeze and checks the copies (see the module).
pub(crate) async fn copy_uppers(
    docker: &Docker,
    plan: &UpperCopyPlan,
) -> Result<UppersCopied, RuntimeError> {
    let declared = image_volumes(docker, &create_reference(&plan.image)).await?;
    let mut writer_mounts = Vec::new();
    let mut checker_mounts = Vec::new();
    for (i, pair) in plan.pairs.iter().enumerate() {
        writer_mounts.push(volume_mount(&pair.upper, &format!("{AT}/{i}/from"), true));
        writer_mounts.push(volume_mount(&pair.to_upper, &format!("{AT}/{i}/to"), false));
        writer_mounts.push(volume_mount(
            &pair.merged,
            &format!("{AT}/{i}/merged"),
            true,
        ));
        // The new overlay before the copy fills its upper layer: the lower layers alone.
        writer_mounts.push(volume_mount(&pair.to, &format!("{AT}/{i}/lower"), true));
        checker_mounts.push(volume_mount(&pair.to_upper, &format!("{AT}/{i}/to"), true));
        checker_mounts.push(volume_mount(&pair.to, &format!("{AT}/{i}/merged"), true));
    }
    writer_mounts.push(Mount {
        target: Some(format!("{AT}/tmp")),
        typ: Some(MountType::TMPFS),
        tmpfs_options: Some(MountTmpfsOptions {
            size_bytes: Some(16 * 1024 * 1024),
            ..Default::default()
        }),
        ..Default::default()
    });
    let writer = format!("{}-uw", plan.helper);
    let checker = format!("{}-uc", plan.helper);
    let writer = helper(docker, plan, &declared, &writer, writer_mounts).await?;
    let checker = match helper(docker, plan, &declared, &checker, checker_mounts).await {
        Ok(id) => id,
        Err(e) => {
            let _ = crate::containers::remove(docker, &writer).await;
            return Err(e);
        }
    };
    let copied = copy_and_check(docker, plan, &writer, &checker).await;
    let (removed_writer, removed_checker) = tokio::join!(
        crate::containers::remove(docker, &writer),
        crate::containers::remove(docker, &checker),
    );
    let copied = copied?;
    removed_writer?;
    removed_checker?;
    Ok(copied)
}

async fn copy_and_check(
    docker: &Docker,
    plan: &UpperCopyPlan,
    writer: &str,
    checker: &str,
) -> Result<UppersCopied, RuntimeError> {
    let what = format!("upper-layer helper {}", plan.helper);
    if let Err(e) = docker.start_container(writer, None).await {
        let message = error::message(&e);
        if crate::helper_run::no_such_command(&message) {
            return Ok(UppersCopied::NotCopied(format!(
                "the image {} has no sleep, sh, cp or find to copy upper layers with",
                plan.image
            )));
        }
        return Err(error::map(e, &what));
    }
    // Before the freeze: the kernel's metacopy, and what the upper layers hold.
    let began = Instant::now();
    let (code, said) = run(docker, writer, &before_script(plan.pairs.len()), &what).await?;
    let before_took = began.elapsed();
    if code != Some(0) {
        return Ok(UppersCopied::NotCopied(format!(
            "the image {} cannot copy upper layers ({}: {})",
            plan.image,
            code.map_or_else(|| "no exit code".to_owned(), |c| c.to_string()),
            last_words(&said)
        )));
    }
    let mut lines = said.lines();
    let metacopy = lines.next().unwrap_or_default().trim();
    if metacopy != "N" {
        return Ok(UppersCopied::NotCopied(format!(
            "this kernel's overlayfs may copy up metadata only (metacopy is {metacopy:?}), which \
             a copy of an upper layer cannot tell from data"
        )));
    }
    let kib: u64 = lines
        .filter_map(|l| l.split_whitespace().next()?.parse::<u64>().ok())
        .sum();
    if kib.saturating_mul(1024) > plan.max_bytes {
        return Ok(UppersCopied::NotCopied(format!(
            "the upper layers hold {} MiB, more than the {} MiB a freeze copies",
            kib / 1024,
            plan.max_bytes / (1024 * 1024)
        )));
    }
    // The freeze holds the copy and the listing of the merged view, nothing else: the exec
    // that runs them is made and started first, and waits for a line on its stdin.
    let mut armed = arm(docker, writer, &frozen_script(plan.pairs.len()), &what).await?;
    let frozen_at = match plan.freeze.as_deref() {
        Some(id) => match crate::containers::pause(docker, id).await {
            Ok(()) => Some((id, Instant::now())),
            // It stopped meanwhile: nothing writes.
            Err(RuntimeError::Conflict(_) | RuntimeError::NotFound(_)) => None,
            Err(e) => return Err(e),
        },
        None => None,
    };
    let ran = tokio::time::timeout(FROZEN_AT_MOST, armed.fire(&what)).await;
    let frozen = match frozen_at {
        Some((id, at)) => {
            let frozen = at.elapsed();
            crate::containers::unpause(docker, id).await?;
            Some(frozen)
        }
        None => None,
    };
    let (code, seen) = ran.map_err(|_| {
        RuntimeError::Engine(format!(
            "the copy of the upper layers took longer than {} s",
            FROZEN_AT_MOST.as_secs()
        ))
    })??;
    let thawed = Instant::now();
    // Its own end, after the thaw.
    crate::exec::wait_exit(docker, &armed.exec, &what).await?;
    if code != Some(0) {
        return Ok(UppersCopied::NotCopied(format!(
            "the copy of the upper layers failed ({}: {})",
            code.map_or_else(|| "no exit code".to_owned(), |c| c.to_string()),
            last_words(&seen)
        )));
    }
    // After the thaw: the new overlays, mounted afresh, list the same. The writer mounted
    // them before their upper layers were filled (to read the lower layers through them), so
    // it goes first: the engine then mounts them again for the checker, with nothing cached.
    crate::containers::remove(docker, writer).await?;
    docker
        .start_container(checker, None)
        .await
        .map_err(|e| error::map(e, &what))?;
    let (code, shown) = run(docker, checker, &list_script(plan.pairs.len()), &what).await?;
    if code != Some(0) {
        return Ok(UppersCopied::NotCopied(format!(
            "the copied upper layers could not be read back ({}: {})",
            code.map_or_else(|| "no exit code".to_owned(), |c| c.to_string()),
            last_words(&shown)
        )));
    }
    tracing::info!(
        helper = %plan.helper,
        kib_copied = kib,
        before_ms = before_took.as_millis() as u64,
        frozen_ms = frozen.map(|f| f.as_millis() as u64),
        checked_ms = thawed.elapsed().as_millis() as u64,
        "copied upper layers under a freeze"
    );
    match differences(&seen, &shown) {
        None => Ok(UppersCopied::Faithful { frozen }),
        Some(why) => Ok(UppersCopied::NotCopied(why)),
    }
}

/// Prints the kernel's metacopy setting, then for each pair the KiB its copy will move.
///
/// A file overlayfs copied up only because it was opened for writing (Postgres opens every
/// relation it reads with `O_RDWR`) is the same as its lower file: such a file, with the same
/// size, time, mode and owner as the file the lower layers show and the same bytes, is left
/// out of the copy, so that the new overlay shows the lower one. Its change time is kept first
/// (in `<AT>/tmp/before.<i>`), and an empty placeholder dated 2200 stands at its place in the
/// copy, so that `cp -a -u` under the freeze skips it; the freeze then checks that none of
/// these files changed since (their change times) and removes the placeholders, or copies them
/// all after all.
fn before_script(pairs: usize) -> String {
    let mut s = format!("set -e; cat {METACOPY}; ");
    for i in 0..pairs {
        s.push_str(&fill(BEFORE, i));
    }
    s
}

const BEFORE: &str = r#"cd @FROM; : > @TMP/same.@I; : > @TMP/before.@I;
find . -type f > @TMP/files.@I;
while IFS= read -r f; do
  [ -f "@LOWER/$f" ] || continue;
  c=$(stat -c '%z %n' "$f");
  [ "$(stat -c '%s %y %a %u %g' "$f")" = "$(stat -c '%s %y %a %u %g' "@LOWER/$f")" ] || continue;
  cmp -s "$f" "@LOWER/$f" || continue;
  printf '%s\n' "$f" >> @TMP/same.@I; printf '%s\n' "$c" >> @TMP/before.@I;
  mkdir -p "@TO/$(dirname "$f")"; touch -d '2200-01-01 00:00' "@TO/$f";
done < @TMP/files.@I;
all=$(du -sk . | cut -f1);
same=$(tr '\n' '\0' < @TMP/same.@I | xargs -0 -r du -k | awk '{s += $1} END {print s + 0}');
echo $((all - same));
"#;

/// Copies each upper layer (but the files [`before_script`] found the same as the lower
/// ones, unless one of them changed since), then lists what the merged views show.
fn frozen_script(pairs: usize) -> String {
    let mut s = String::from("set -e; ");
    for i in 0..pairs {
        s.push_str(&fill(FROZEN, i));
    }
    s.push_str(&list_script(pairs));
    s
}

const FROZEN: &str = r#"cp -a -u @FROM/. @TO/; cd @FROM;
tr '\n' '\0' < @TMP/same.@I | xargs -0 -r stat -c '%z %n' > @TMP/after.@I;
if cmp -s @TMP/before.@I @TMP/after.@I; then
  cd @TO; tr '\n' '\0' < @TMP/same.@I | xargs -0 -r rm -f;
else
  while IFS= read -r f; do cp -a "$f" "@TO/$f"; done < @TMP/same.@I;
fi;
"#;

/// `script` for the `i`th pair: its paths in place of `@FROM`, `@TO`, `@LOWER`, `@TMP`, `@I`.
fn fill(script: &str, i: usize) -> String {
    script
        .replace("@FROM", &format!("{AT}/{i}/from/{UPPER_DIR}"))
        .replace("@TO", &format!("{AT}/{i}/to/{UPPER_DIR}"))
        .replace("@LOWER", &format!("{AT}/{i}/lower"))
        .replace("@TMP", &format!("{AT}/tmp"))
        .replace("@I", &i.to_string())
}

/// For each pair, a line `@<i>`, then every name in the merged view (`<AT>/<i>/merged`) of
/// each directory the copied upper layer (`<AT>/<i>/to/upper`) holds, one path a line.
fn list_script(pairs: usize) -> String {
    let mut s = String::from("set -e; ");
    for i in 0..pairs {
        s.push_str(&format!(
            "echo @{i}; cd {AT}/{i}/to/{UPPER_DIR}; find . -type d -print0 | \
             (cd {AT}/{i}/merged && xargs -0 sh -c 'find \"$@\" -mindepth 1 -maxdepth 1' sh); "
        ));
    }
    s
}

/// What differs between the listing during the freeze (`seen`) and the new overlays'
/// (`shown`), in a sentence; `None` when they agree.
fn differences(seen: &str, shown: &str) -> Option<String> {
    let set = |s: &str| -> BTreeSet<(usize, String)> {
        let mut pair = 0;
        let mut names = BTreeSet::new();
        for line in s.lines() {
            if let Some(i) = line.strip_prefix('@').and_then(|i| i.parse().ok()) {
                pair = i;
            } else if !line.is_empty() {
                names.insert((pair, line.to_owned()));
            }
        }
        names
    };
    let (seen, shown) = (set(seen), set(shown));
    let again: Vec<&str> = shown.difference(&seen).map(|(_, n)| n.as_str()).collect();
    let lost: Vec<&str> = seen.difference(&shown).map(|(_, n)| n.as_str()).collect();
    if again.is_empty() && lost.is_empty() {
        return None;
    }
    let few = |names: &[&str]| names.iter().take(3).copied().collect::<Vec<_>>().join(", ");
    Some(format!(
        "a copy of the upper layers would show {} name(s) the instance does not ({}) and \
         miss {} it shows ({}): a directory in them was made again over a lower one or \
         renamed, which overlayfs marks in extended attributes a helper cannot read",
        again.len(),
        few(&again),
        lost.len(),
        few(&lost)
    ))
}

/// The last few hundred characters of what a command said.
fn last_words(said: &str) -> String {
    let said = said.trim();
    said.chars()
        .skip(said.chars().count().saturating_sub(300))
        .collect()
}

/// An idle helper of `plan.image` named `name` with `mounts`: root, no network, and only the
/// capabilities `cp -a` needs.
async fn helper(
    docker: &Docker,
    plan: &UpperCopyPlan,
    declared: &[String],
    name: &str,
    mounts: Vec<Mount>,
) -> Result<String, RuntimeError> {
    let body = ContainerCreateBody {
        image: Some(create_reference(&plan.image)),
        entrypoint: Some(vec![IDLE[0].to_owned()]),
        cmd: Some(vec![IDLE[1].to_owned()]),
        user: Some("0:0".to_owned()),
        working_dir: Some("/".to_owned()),
        labels: Some(plan.labels.clone().into_iter().collect()),
        network_disabled: Some(true),
        host_config: Some(HostConfig {
            mounts: Some(mounts),
            network_mode: Some("none".to_owned()),
            privileged: Some(false),
            cap_drop: Some(vec!["ALL".to_owned()]),
            cap_add: Some(CP_CAPABILITIES.iter().map(|c| (*c).to_owned()).collect()),
            security_opt: Some(vec![crate::containers::NO_NEW_PRIVILEGES.to_owned()]),
            pids_limit: Some(64),
            ..Default::default()
        }),
        ..Default::default()
    };
    create_fresh(docker, name, body, declared, &format!("helper {name}")).await
}

/// An exec started in a helper and waiting for the line on its stdin that runs its script.
struct Armed {
    exec: String,
    output: std::pin::Pin<
        Box<dyn futures_util::Stream<Item = Result<LogOutput, bollard::errors::Error>> + Send>,
    >,
    input: std::pin::Pin<Box<dyn tokio::io::AsyncWrite + Send>>,
}

/// The most of a helper script's output kept: its listing of upper layers of up to 256 MiB
/// (about 100 bytes a file). A listing cut at its start no longer agrees with the layers, so
/// the copy falls back to a move rather than trusting it.
const MAX_SAID: usize = 64 << 20;

/// What the armed script prints last: its exit code after it.
const END: &str = "@berth-upper-end ";

impl Armed {
    /// Runs the script and reads its output until it says it ended: its exit code and what it
    /// printed before. The exec itself may still be ending.
    async fn fire(&mut self, what: &str) -> Result<(Option<i64>, String), RuntimeError> {
        use tokio::io::AsyncWriteExt;
        self.input
            .write_all(b"go\n")
            .await
            .map_err(|e| RuntimeError::Engine(format!("{what}: {e}")))?;
        self.input
            .flush()
            .await
            .map_err(|e| RuntimeError::Engine(format!("{what}: {e}")))?;
        let mut said = String::new();
        while let Some(frame) = self.output.next().await {
            let frame = frame.map_err(|e| error::map(e, what))?;
            said.push_str(&String::from_utf8_lossy(&frame.into_bytes()));
            if said.len() > MAX_SAID {
                return Err(RuntimeError::Engine(format!(
                    "{what}: the copy's script printed more than {MAX_SAID} bytes"
                )));
            }
            if let Some(at) = said.rfind(END)
                && said[at..].contains('\n')
            {
                let code = said[at + END.len()..].trim().parse().ok();
                said.truncate(at);
                return Ok((code, said));
            }
        }
        Ok((None, said))
    }
}

/// Makes and starts an exec of `script` in helper `id` that waits for a line on its stdin
/// before it runs it, and then prints [`END`] and its exit code.
async fn arm(docker: &Docker, id: &str, script: &str, what: &str) -> Result<Armed, RuntimeError> {
    let wrapped = format!("read -r go; ( {script} ); echo \"{END}$?\"");
    let argv = vec!["sh".to_owned(), "-c".to_owned(), wrapped];
    let (exec, started) = crate::helper_run::start(docker, id, argv, true, what).await?;
    match started {
        Ok(StartExecResults::Attached { output, input }) => Ok(Armed {
            exec,
            output,
            input,
        }),
        Ok(StartExecResults::Detached) => Err(RuntimeError::Engine(format!(
            "{what}: the engine did not attach to the copy's exec"
        ))),
        Err(e) => Err(error::map(e, what)),
    }
}

/// Runs `sh -c script` in helper `id`; answers its exit code and its output (stdout and
/// stderr), of which at most [`MAX_SAID`] bytes are kept.
async fn run(
    docker: &Docker,
    id: &str,
    script: &str,
    what: &str,
) -> Result<(Option<i64>, String), RuntimeError> {
    let argv = vec!["sh".to_owned(), "-c".to_owned(), script.to_owned()];
    let ran = run_to_end(docker, id, argv, MAX_SAID, docker.timeout(), what).await?;
    Ok((ran.code, ran.said))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listings_that_agree_name_for_name_are_no_difference_whatever_their_order() {
        let seen = "@0\n./a\n./d/b\n@1\n./x\n";
        let shown = "@1\n./x\n@0\n./d/b\n./a\n";
        assert_eq!(differences(seen, shown), None);
    }

    #[test]
    fn a_name_shown_again_or_lost_is_a_difference_that_names_it() {
        let seen = "@0\n./d\n./d/c\n";
        let shown = "@0\n./d\n./d/c\n./d/b\n";
        let why = differences(seen, shown).unwrap();
        assert!(
            why.contains("1 name(s) the instance does not (./d/b)"),
            "{why}"
        );
        // The same name under another pair is another name.
        assert!(differences("@0\n./a\n", "@1\n./a\n").is_some());
    }

    #[test]
    fn the_scripts_copy_then_list_each_pair() {
        let s = frozen_script(2);
        let cp0 = s
            .find("cp -a -u /berth-upper/0/from/upper/. /berth-upper/0/to/upper/")
            .unwrap();
        let cp1 = s.find("cp -a -u /berth-upper/1/from/upper/.").unwrap();
        let list = s.find("echo @0").unwrap();
        assert!(cp0 < cp1 && cp1 < list, "{s}");
        assert!(list_script(1).contains("cd /berth-upper/0/merged"));
        let before = before_script(1);
        assert!(before.contains("cd /berth-upper/0/from/upper;"), "{before}");
        assert!(before.contains("\"/berth-upper/0/lower/$f\""), "{before}");
        assert!(!before.contains('@'), "{before}");
    }
}
