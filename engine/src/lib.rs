//! The Metrale inference engine.
