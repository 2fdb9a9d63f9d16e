//! The model runner: turns a `SchedulerOutput` into one varlen batch, runs the model's
//! forward on the backend, and samples. It owns the model and the KV cache's device memory;
//! which blocks belong to whom is decided by the scheduler and arrives as block tables.

use crate::backend::sampling::{SampleRow, token_logprobs};
use crate::backend::{Backend, BatchInputs, Result, SeqChunk};
use crate::models::{KvStorage, Model};
use crate::scheduler::io::{RunnerOutput, SchedulerOutput, SeqOutput};

pub struct Runner<B: Backend, M: Model<B>> {
    pub backend: B,
    pub model: M,
    pub kv: KvStorage<B>,
}

impl<B: Backend, M: Model<B>> Runner<B, M> {
    pub fn new(backend: B, model: M, num_blocks: usize, block_size: usize) -> Result<Self> {
        let kv = model.new_kv_storage(&backend, num_blocks, block_size)?;
        Ok(Self { backend, model, kv })
    }

    /// Run one step.
    pub fn execute(&mut self, step: &SchedulerOutput) -> Result<RunnerOutput> {
        if step.seqs.is_empty() {
            return Ok(RunnerOutput::default());
        }
        // Which rows of each chunk need logits: every row for prompt logprobs, else the last
        // row when the chunk reaches the end of the known tokens.
        let chunks: Vec<SeqChunk<'_>> = step
            .seqs
            .iter()
            .map(|s| {
                let n = s.token_ids.len();
                let logits_rows = if s.want_prompt_logprobs {
                    (0..n).collect()
                } else if s.sample {
                    vec![n - 1]
                } else {
                    vec![]
                };
                SeqChunk {
                    tokens: &s.token_ids,
                    start_pos: s.start_pos,
                    block_table: &s.block_ids,
                    logits_rows,
                }
            })
            .collect();
        let host = BatchInputs::build(self.kv.block_size, &chunks);
        let batch = self.backend.prepare_batch(&host)?;
        let logits = self
            .model
            .forward(&self.backend, &host, &batch, &mut self.kv)?;

        // Rows to sample: the last logits row of each chunk that samples.
        let mut sample_rows = Vec::new();
        let mut row = 0;
        for (s, c) in step.seqs.iter().zip(&chunks) {
            row += c.logits_rows.len();
            if s.sample {
                sample_rows.push(SampleRow {
                    logits_row: row - 1,
                    params: &s.sampling,
                    all_token_ids: &s.all_token_ids,
                    num_prompt_tokens: s.num_prompt_tokens,
                });
            }
        }
        let mut sampled = self.backend.sample(&logits, &sample_rows)?.into_iter();
        // Prompt logprobs are rare (scoring); only then do the logits come to the host.
        let vocab = self.model.vocab_size();
        let host_logits = if step.seqs.iter().any(|s| s.want_prompt_logprobs) {
            self.backend.to_host(&logits)?
        } else {
            Vec::new()
        };

        let mut out = RunnerOutput {
            seqs: Vec::with_capacity(step.seqs.len()),
        };
        let mut row = 0;
        for (s, c) in step.seqs.iter().zip(&chunks) {
            let mut seq_out = SeqOutput {
                req_id: s.req_id,
                sampled: None,
                sampled_logprobs: None,
                prompt_logprobs: Vec::new(),
            };
            if s.want_prompt_logprobs {
                let k = s.sampling.prompt_logprobs.unwrap_or(0) as usize;
                for (j, _) in c.logits_rows.iter().enumerate() {
                    let p = s.start_pos + j;
                    if p + 1 < s.num_prompt_tokens {
                        let r = row + j;
                        let target = s.all_token_ids[p + 1];
                        seq_out.prompt_logprobs.push(token_logprobs(
                            &host_logits[r * vocab..(r + 1) * vocab],
                            target,
                            k,
                        ));
                    }
                }
            }
            if s.sample
                && let Some(x) = sampled.next()
            {
                seq_out.sampled = Some(x.token_id);
                seq_out.sampled_logprobs = x.logprobs;
            }
            row += c.logits_rows.len();
            out.seqs.push(seq_out);
        }
        Ok(out)
    }
}
