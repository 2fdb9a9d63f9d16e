//! Paged KV cache bookkeeping: which blocks each request holds, and the prefix cache.
//! No tensors: the runner owns the memory, this module owns the block ids.

pub mod block_pool;
pub mod grouped;
pub mod groups;
pub mod hash;
pub mod manager;
pub mod serving;
pub mod state;

pub use block_pool::{BlockId, NULL_BLOCK};
pub use grouped::{GroupConfig, GroupedComputed, GroupedKvConfig, GroupedKvManager};
pub use groups::{Attention, KvGroupSpec, kv_groups};
pub use hash::{BlockHash, HashKey};
pub use manager::{ComputedBlocks, KvCacheConfig, KvCacheError, KvCacheManager, PrefixCacheStats};
pub use serving::{Computed, ServingKv};
pub use state::{NO_STATE, StateCacheConfig, StateInit, StatePlan, StateSave};
