//! How a store keeps a workflow's large stages until they are released: a stage whose tasks
//! all wait for the same parents and share every column but the payload goes in as parts
//! that claims take once it is released, instead of a row per task
//! (docs/decisions/0023-tasks-made-when-released.md, 0026 and 0027).

/// How a store keeps a workflow's large stages until they are released.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Keeping {
    /// The fewest tasks of a stage kept; `None`: every task is a row from the start.
    pub min: Option<usize>,
    /// The most tasks of a part that claims take once released; `None`: the stage is one
    /// part, made rows when released (the reference the parts are checked against).
    pub part: Option<usize>,
}

impl Keeping {
    /// Stages of [`KEPT_STAGE_MIN`] tasks or more kept in parts of [`KEPT_STAGE_PART`].
    pub const DEFAULT: Keeping = Keeping {
        min: Some(KEPT_STAGE_MIN),
        part: Some(KEPT_STAGE_PART),
    };
}

/// The fewest tasks of a stage kept by default: below a few hundred, the rows a stage saves
/// are not worth a statement of their own.
pub const KEPT_STAGE_MIN: usize = 256;

/// The most tasks of a kept stage's part by default: a claim of as many tasks as a worker
/// usually asks for takes one part.
pub const KEPT_STAGE_PART: usize = 1000;

/// The most bytes of JSON a kept stage's payloads may take together; a larger stage goes in
/// as rows. PostgreSQL reads them as one `jsonb` value, which it holds to 256 MiB and which
/// may take six times its text (an array of one-digit numbers).
pub const KEPT_PAYLOAD_BYTES: usize = 32 << 20;
