//! Overlay volumes on the real engine: the probe says this engine mounts them; an overlay over
//! a volume shows the volume's files with its root's owner and mode, keeps what is written
//! in its own upper layer and leaves the lower as it was; an overlay over a layer that is not
//! there fails to mount with the engine's words.

use berth_core::runtime::{LABEL_COPY, Layer, OverlayPlan, Runtime, RuntimeError};

use crate::common::{self, Scope};
use crate::volumes::in_volume;

#[tokio::test]
async fn an_overlay_volume_shows_its_lower_keeps_writes_in_its_upper_and_leaves_the_lower_alone() {
    let rt = common::runtime().await;
    let scope = Scope::new("layers");
    let image = common::image(common::BUSYBOX);
    rt.ensure_image(&image).await.expect("the image is ready");
    let reference = image.as_str().to_owned();
    let mut labels = common::labels();
    labels.insert(LABEL_COPY.to_owned(), "cpy:layers".to_owned());

    assert!(
        rt.probe_overlay_volumes(&reference, &scope.name("probe"), &labels)
            .await
            .expect("the probe answers"),
        "this engine mounts overlay volumes"
    );

    let lower = scope.name("lower");
    rt.create_volume(&lower, &labels).await.expect("made");
    in_volume(
        &reference,
        &lower,
        "cd /d && echo base > f && mkdir dir && echo inner > dir/g && chown 999:998 . && chmod 0750 .",
    );
    let plan = OverlayPlan {
        name: scope.name("merged"),
        upper: scope.name("merged.up"),
        lowers: vec![Layer {
            volume: lower.clone(),
            dir: String::new(),
        }],
        labels: labels.clone(),
        image: reference.clone(),
        helper: scope.name("helper"),
    };
    rt.create_overlay_volume(&plan)
        .await
        .expect("the overlay is made");
    let again = rt.create_overlay_volume(&plan).await;
    assert!(
        matches!(again, Err(RuntimeError::Conflict(_))),
        "its volumes exist: {again:?}"
    );
    let taken = OverlayPlan {
        upper: scope.name("taken.up"),
        helper: scope.name("helper-taken"),
        ..plan.clone()
    };
    let refused = rt.create_overlay_volume(&taken).await;
    assert!(
        matches!(refused, Err(RuntimeError::Conflict(_))),
        "its name is taken: {refused:?}"
    );
    assert_eq!(
        rt.volume_labels(&taken.upper).await.expect("asked"),
        None,
        "an overlay refused for its name leaves no upper volume"
    );
    assert!(
        rt.volume_labels(&plan.upper)
            .await
            .expect("asked")
            .is_some(),
        "the upper volume the first overlay stands on stays"
    );
    assert_eq!(
        in_volume(
            &reference,
            &plan.name,
            "cat /d/f /d/dir/g && stat -c '%u:%g %a' /d"
        ),
        "base\ninner\n999:998 750",
        "the lower's files, and its root's owner and mode"
    );
    in_volume(
        &reference,
        &plan.name,
        "echo changed > /d/f && echo new > /d/h && rm /d/dir/g",
    );
    assert_eq!(
        in_volume(&reference, &plan.name, "cat /d/f /d/h && ls /d/dir | wc -l"),
        "changed\nnew\n0"
    );
    assert_eq!(
        in_volume(&reference, &lower, "cat /d/f /d/dir/g && ls /d"),
        "base\ninner\ndir\nf",
        "the lower is as it was"
    );
    assert_eq!(
        in_volume(&reference, &plan.upper, "cat /d/upper/f /d/upper/h"),
        "changed\nnew",
        "what was written is in the upper layer"
    );

    // An overlay over the first one's upper layer and its lower: a branch of a branch.
    let second = OverlayPlan {
        name: scope.name("second"),
        upper: scope.name("second.up"),
        lowers: vec![
            Layer {
                volume: plan.upper.clone(),
                dir: "upper".to_owned(),
            },
            Layer {
                volume: lower.clone(),
                dir: String::new(),
            },
        ],
        helper: scope.name("helper2"),
        ..plan.clone()
    };
    rt.create_overlay_volume(&second).await.expect("made");
    assert_eq!(
        in_volume(
            &reference,
            &second.name,
            "cat /d/f /d/h && ls /d/dir | wc -l && stat -c '%u:%g %a' /d"
        ),
        "changed\nnew\n0\n999:998 750"
    );

    // An overlay over a layer that is not there: the engine cannot mount it.
    let broken = OverlayPlan {
        name: scope.name("broken"),
        upper: scope.name("broken.up"),
        lowers: vec![Layer {
            volume: lower.clone(),
            dir: "missing".to_owned(),
        }],
        helper: scope.name("helper3"),
        ..plan.clone()
    };
    let err = rt
        .create_overlay_volume(&broken)
        .await
        .expect_err("its lower layer is missing");
    assert!(
        matches!(err, RuntimeError::Engine(_) | RuntimeError::NotFound(_)),
        "{err:?}"
    );
    assert!(err.to_string().contains("missing"), "{err}");
    assert_eq!(
        rt.volume_labels(&broken.upper).await.expect("asked"),
        None,
        "the upper volume made for an overlay that could not be made is removed again"
    );

    for volume in [&second.name, &second.upper, &plan.name, &plan.upper, &lower] {
        rt.remove_volume(volume, LABEL_COPY, "cpy:layers")
            .await
            .expect("removed");
    }
}
