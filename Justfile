# berth's everyday commands. Each is a thin wrapper: the plain command is shown beside it.

# List the recipes.
default:
    @just --list

# Run the daemon with defaults (cargo run --release -- serve).
run *ARGS:
    cargo run --release -- serve {{ARGS}}

# Run the whole test suite, preparing the fixture registry and images first (scripts/test).
test *ARGS:
    scripts/test {{ARGS}}

# Formatting and lints, as CI would have them.
lint:
    cargo fmt --all -- --check
    cargo clippy --workspace --all-targets -- -D warnings

# Prepare the fixture registry and images without running tests (scripts/fixtures).
fixtures:
    scripts/fixtures

# Stop the fixture registry and remove its images (scripts/fixtures stop).
fixtures-stop:
    scripts/fixtures stop

# Measure berth against raw Docker baselines and update docs/benchmarks.md (scripts/bench).
bench *ARGS:
    scripts/bench {{ARGS}}
