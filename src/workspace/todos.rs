//! The agent's todo list (`todo_write` / `todo_read`): a small list held in
//! memory, shared by every clone of a [`Todos`], replaced whole by each
//! write. A write is checked in full before anything changes: a refused
//! write leaves the list as it was.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};

use serde::{Deserialize, Serialize};

/// The most items one list holds.
pub const MAX_TODOS: usize = 100;

/// The longest content of one item, in characters.
pub const MAX_TODO_CHARS: usize = 1000;

/// Where an item stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TodoStatus {
    /// Not started.
    Pending,
    /// Being worked on.
    InProgress,
    /// Done.
    Completed,
}

/// One item of the list.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Todo {
    /// The caller's id for it, if any (unique within the list).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// What is to be done (non-empty, at most [`MAX_TODO_CHARS`] characters).
    pub content: String,
    /// Where it stands.
    pub status: TodoStatus,
}

/// How many items stand where.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TodoCounts {
    /// All items.
    pub total: usize,
    /// Pending.
    pub pending: usize,
    /// In progress.
    pub in_progress: usize,
    /// Completed.
    pub completed: usize,
}

impl TodoCounts {
    fn of(items: &[Todo]) -> TodoCounts {
        let mut c = TodoCounts { total: items.len(), ..TodoCounts::default() };
        for t in items {
            match t.status {
                TodoStatus::Pending => c.pending += 1,
                TodoStatus::InProgress => c.in_progress += 1,
                TodoStatus::Completed => c.completed += 1,
            }
        }
        c
    }
}

/// Why a write of the list was refused (the list is unchanged).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TodoError {
    /// More items than [`MAX_TODOS`].
    #[error("{count} todo items; at most {MAX_TODOS}: merge or drop some")]
    TooMany {
        /// How many were given.
        count: usize,
    },
    /// An item's content is empty (or only whitespace).
    #[error("todo item {index}: empty content; say what is to be done")]
    EmptyContent {
        /// Which item (from 0).
        index: usize,
    },
    /// An item's content is too long.
    #[error("todo item {index}: {chars} characters; at most {MAX_TODO_CHARS}: shorten it")]
    TooLong {
        /// Which item (from 0).
        index: usize,
        /// How many characters it has.
        chars: usize,
    },
    /// Two items carry the same id.
    #[error("todo item {index}: the id {id:?} is used by an earlier item; ids must be unique")]
    DuplicateId {
        /// Which item (from 0).
        index: usize,
        /// The id.
        id: String,
    },
}

/// The todo list, shared: clones see and change the same list.
#[derive(Clone, Debug, Default)]
pub struct Todos {
    items: Arc<Mutex<Vec<Todo>>>,
}

impl Todos {
    /// An empty list.
    pub fn new() -> Todos {
        Todos::default()
    }

    /// Replace the list with `items`, after checking every item.
    pub fn write_todos(&self, items: Vec<Todo>) -> Result<TodoCounts, TodoError> {
        check(&items)?;
        let counts = TodoCounts::of(&items);
        // The list is replaced in one move, so a panic elsewhere while the
        // lock was held cannot have left it half-written: a poisoned lock
        // is still usable.
        *self.items.lock().unwrap_or_else(PoisonError::into_inner) = items;
        Ok(counts)
    }

    /// The list and its counts.
    pub fn read_todos(&self) -> (Vec<Todo>, TodoCounts) {
        let items = self.items.lock().unwrap_or_else(PoisonError::into_inner).clone();
        let counts = TodoCounts::of(&items);
        (items, counts)
    }
}

fn check(items: &[Todo]) -> Result<(), TodoError> {
    if items.len() > MAX_TODOS {
        return Err(TodoError::TooMany { count: items.len() });
    }
    let mut ids = HashSet::new();
    for (index, t) in items.iter().enumerate() {
        if t.content.trim().is_empty() {
            return Err(TodoError::EmptyContent { index });
        }
        let chars = t.content.chars().count();
        if chars > MAX_TODO_CHARS {
            return Err(TodoError::TooLong { index, chars });
        }
        if let Some(id) = &t.id {
            if !ids.insert(id.as_str()) {
                return Err(TodoError::DuplicateId { index, id: id.clone() });
            }
        }
    }
    Ok(())
}
