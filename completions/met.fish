# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_met_global_optspecs
    string join \n h/help V/version
end

function __fish_met_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_met_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_met_using_subcommand
    set -l cmd (__fish_met_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c met -n "__fish_met_needs_command" -s h -l help -d 'Print help'
complete -c met -n "__fish_met_needs_command" -s V -l version -d 'Print version'
complete -c met -n "__fish_met_needs_command" -f -a "serve" -d 'Serve the model over an OpenAI-compatible HTTP API'
complete -c met -n "__fish_met_needs_command" -f -a "score" -d 'Score a token sequence: each next token\'s log-probability and the top-k alternatives, as JSON'
complete -c met -n "__fish_met_needs_command" -f -a "download" -d 'Fetch a Hub checkpoint (ORG/NAME) into the Hugging Face cache and print its directory'
complete -c met -n "__fish_met_needs_command" -f -a "print-tuning-table" -d 'Print the tuning settings\' Markdown table (docs/cuda.md\'s "Tuning" is this)'
complete -c met -n "__fish_met_needs_command" -f -a "rank" -d 'One rank of `met serve --tensor-parallel-size N` (started by rank 0, not by hand)'
complete -c met -n "__fish_met_needs_command" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c met -n "__fish_met_using_subcommand serve" -l device -d 'Where to run the model' -r -f -a "cpu\t''
cuda\t'The first NVIDIA GPU (a `met` built with `--features cuda`; `CUDA_VISIBLE_DEVICES` chooses which)'"
complete -c met -n "__fish_met_using_subcommand serve" -l dtype -d 'The type weights, activations and the KV cache are computed in' -r -f -a "auto\t'bfloat16 on cuda, float32 on the cpu'
bfloat16\t'cuda only'
float32\t'Weights, activations and the KV cache in f32: on cuda twice the memory and far slower, for checking against float32 references; what the cpu always does'"
complete -c met -n "__fish_met_using_subcommand serve" -l load-format -d 'How to obtain weights' -r -f -a "auto\t'Safetensors weights from the model directory'
dummy\t'Random weights of the right shapes from config.json alone (for benchmarks)'"
complete -c met -n "__fish_met_using_subcommand serve" -l requantize -d 'Re-quantize part of the checkpoint as it loads, PART=FORMAT (repeatable or comma-separated): PART lm_head, experts, experts.gate_up or experts.down (the routed experts\' projections), FORMAT nvfp4 (ModelOpt\'s rounding) or bf16. What a recipe\'s [checkpoint.requantize] passes; reported at start-up and in GET /version' -r
complete -c met -n "__fish_met_using_subcommand serve" -l host -d 'Address to listen on' -r
complete -c met -n "__fish_met_using_subcommand serve" -l port -d 'Port to listen on; 0 picks a free one (the address is printed)' -r
complete -c met -n "__fish_met_using_subcommand serve" -l model-name -d 'The name clients pass as `model` (default: the checkpoint directory\'s name, or the repository id of a Hub checkpoint)' -r
complete -c met -n "__fish_met_using_subcommand serve" -l revision -d 'With a Hub repository id as MODEL: the branch, tag or commit to fetch' -r
complete -c met -n "__fish_met_using_subcommand serve" -l max-seq-len -d 'Longest sequence, prompt plus output (default: the model\'s context)' -r
complete -c met -n "__fish_met_using_subcommand serve" -l max-batch-size -d 'Most sequences in one engine step [default: 16 on the cpu, 256 on cuda]' -r
complete -c met -n "__fish_met_using_subcommand serve" -l max-num-batched-tokens -d 'Token budget of one step; longer prompts are prefilled in chunks [default: 2048, or the batch size if larger]' -r
complete -c met -n "__fish_met_using_subcommand serve" -l prefill-chunk-with-decodes -d 'Most prompt tokens a step prefills while other sequences are decoding (e.g. 512): long prompts then advance in chunks of this size beside running streams, whose inter-token latency stays near a small chunk\'s step; a step with nothing decoding still takes the whole --max-num-batched-tokens [default: off]' -r
complete -c met -n "__fish_met_using_subcommand serve" -l gpu-memory-utilization -d 'Fraction of GPU memory to use, in (0, 1] (CUDA)' -r
complete -c met -n "__fish_met_using_subcommand serve" -l kv-cache-dtype -d 'KV cache storage type' -r -f -a "auto\t'The model\'s dtype'
bf16\t''
fp8\t'e4m3 values with one f32 scale per 128 dims of each cached head: about half the memory of bf16 on cuda; the cpu rounds its f32 cache the same way (same accuracy, no saving)'"
complete -c met -n "__fish_met_using_subcommand serve" -l enable-prefix-caching -d 'Reuse the KV cache of shared prompt prefixes (`--enable-prefix-caching true|false` is accepted too)' -r -f -a "true\t''
false\t''"
complete -c met -n "__fish_met_using_subcommand serve" -l api-key -d 'Require `Authorization: Bearer KEY` on the API (not on /health, /ready, /metrics)' -r
complete -c met -n "__fish_met_using_subcommand serve" -l max-queued-requests -d 'Requests waiting for a batch slot beyond this are refused with 429 and Retry-After (a request that gets a free slot at once never counts; `n` choices count once)' -r
complete -c met -n "__fish_met_using_subcommand serve" -l request-timeout -d 'Abort a request running longer than this many seconds (400 `request_timeout`, which clients do not retry, or an error event when streaming)' -r
complete -c met -n "__fish_met_using_subcommand serve" -l tool-call-parser -d 'Parse tool calls in replies: qwen3_coder (Qwen3-Coder, Qwen3.5/3.6), hermes (Qwen3), llama3_json (Llama 3.1+), mistral, openai (gpt-oss), minimax_m2, deepseek_v3, deepseek_v31 or nemotron_json (Nemotron Nano v2)' -r
complete -c met -n "__fish_met_using_subcommand serve" -l reasoning-parser -d 'Split reasoning from the answer: qwen3 (`<think>…</think>`) or openai_gptoss (gpt-oss)' -r
complete -c met -n "__fish_met_using_subcommand serve" -l num-gpu-blocks-override -d 'Exactly this many KV cache blocks, whatever the memory would allow (for tests and reproducing memory pressure)' -r
complete -c met -n "__fish_met_using_subcommand serve" -l ssm-cache-slots -d 'Hybrid (linear-attention) models: recurrent-state slots, one per running sequence; a request waits for a free one [default: --max-batch-size]' -r
complete -c met -n "__fish_met_using_subcommand serve" -l ssm-checkpoint-slots -d 'Hybrid models with --enable-prefix-caching: recurrent-state checkpoints kept for prefix reuse, least recently used evicted first [default: --ssm-cache-slots]' -r
complete -c met -n "__fish_met_using_subcommand serve" -l ssm-checkpoint-interval -d 'Hybrid models with --enable-prefix-caching: tokens between recurrent-state checkpoints, a multiple of the 16-token KV block; a cached prefix is reused up to its last checkpoint [default: 512]' -r
complete -c met -n "__fish_met_using_subcommand serve" -l num-drafts -d 'With --speculative: tokens the MTP head drafts a step (1 to 16) [default: 3]' -r
complete -c met -n "__fish_met_using_subcommand serve" -l tensor-parallel-size -d 'Split the model over N ranks (tensor parallelism: attention by heads, MLPs by columns then rows, the head by vocabulary). With --device cpu the ranks are processes on this host joined over TCP; CUDA ranks need NCCL, not built yet' -r
complete -c met -n "__fish_met_using_subcommand serve" -l nnodes -d 'Hosts the --tensor-parallel-size ranks span (each runs N / NNODES of them); node 0 serves HTTP, the others only run their ranks' -r
complete -c met -n "__fish_met_using_subcommand serve" -l node-rank -d 'This host\'s place among --nnodes, 0 to NNODES - 1' -r
complete -c met -n "__fish_met_using_subcommand serve" -l master-addr -d 'Node 0\'s address the ranks meet at (with --nnodes above 1) [default: 127.0.0.1]' -r
complete -c met -n "__fish_met_using_subcommand serve" -l master-port -d 'The port they meet on [default: a free one, with one node]' -r
complete -c met -n "__fish_met_using_subcommand serve" -l dist-timeout -d 'Seconds rank 0 waits on another rank inside a step before it takes that rank for stuck, fails every request and stops (as a rank that died does)' -r
complete -c met -n "__fish_met_using_subcommand serve" -l speculative-max-batch -d 'With --speculative: drafting pauses while more sequences than this are running [default: 32]' -r
complete -c met -n "__fish_met_using_subcommand serve" -l header-read-timeout -d 'Close a connection that has not sent a whole request head this many seconds after the server started waiting for one (a new connection, or the end of the previous response)' -r
complete -c met -n "__fish_met_using_subcommand serve" -l body-read-timeout -d 'Answer 408 to a request whose body has not all arrived this many seconds after the server started reading it' -r
complete -c met -n "__fish_met_using_subcommand serve" -l keep-alive-timeout -d 'Close a connection with no request in progress and no traffic for this many seconds' -r
complete -c met -n "__fish_met_using_subcommand serve" -l max-connections -d 'Connections open at once; a new one beyond it gets 503 and is closed (lowered at start-up to what the process\'s descriptor limit allows)' -r
complete -c met -n "__fish_met_using_subcommand serve" -l tokenizer-workers -d 'Threads that parse, render and tokenize requests at once [default: one a CPU core]' -r
complete -c met -n "__fish_met_using_subcommand serve" -l speculative-ladder -d 'With --speculative: the most drafts a step by running sequences, as rungs RUNNING:DRAFTS, e.g. `1:3,2:2,8:1,32:0` (3 drafts from 1 sequence, 2 from 2, 1 from 8, none from 32; without a `N:0` rung, drafts at any batch); --num-drafts and --speculative-max-batch cap it [default: 1:NUM_DRAFTS,MAX_BATCH+1:0]' -r
complete -c met -n "__fish_met_using_subcommand serve" -l speculative-draft-cost -d 'With --speculative: what one draft adds to a step\'s time, as a fraction of a plain decode step, until the engine has timed its own steps at the batch size; with the acceptance measured so far it decides how many drafts pay, down to none (0: always draft the ladder\'s cap, time nothing) [default: 0.35]' -r
complete -c met -n "__fish_met_using_subcommand serve" -l metrics-socket -d 'Unix socket for live metrics events (NDJSON, docs/metrics-socket.md) [default: $XDG_RUNTIME_DIR/metrale/met-PORT.sock, else /tmp/metrale-UID/met-PORT.sock]' -r -F
complete -c met -n "__fish_met_using_subcommand serve" -l mtp-gate -d 'When the MTP head drafts: auto (pause above --speculative-max-batch running sequences) or force (at every batch size)' -r -f -a "auto\t'Drafting pauses while more than --speculative-max-batch sequences run (met\'s default)'
force\t'Draft at every batch size (--speculative-max-batch unlimited)'"
complete -c met -n "__fish_met_using_subcommand serve" -l scheduling-policy -d 'Request scheduling: fifo, the only policy met has (first come, first served)' -r -f -a "fifo\t''"
complete -c met -n "__fish_met_using_subcommand serve" -l mtp-quantization -d 'The MTP head\'s weight type: bf16, the checkpoint\'s (met does not quantize the head)' -r -f -a "bf16\t''"
complete -c met -n "__fish_met_using_subcommand serve" -l disable-tool-grammar -d 'Do not hold tool calls to the --tool-call-parser format\'s grammar (forced calls, and the calls a model opens under `auto`); false (the default) keeps it' -r -f -a "true\t''
false\t''"
complete -c met -n "__fish_met_using_subcommand serve" -l ssm-h-dtype -d 'Hybrid models\' recurrent state storage: f32 (met\'s); f16-pool is accepted and runs as f32' -r -f -a "f32\t'A float32 state in per-sequence slots (what met keeps)'
f16-pool\t'Accepted as a name for met\'s slot pool; met keeps the state in float32 (a note says so)'"
complete -c met -n "__fish_met_using_subcommand serve" -l ssm-tail-midchunk -d 'Save recurrent-state checkpoints in the middle of a prefill chunk\'s tail: met saves them only at --ssm-checkpoint-interval boundaries, so false is what it does; true is refused' -r -f -a "true\t''
false\t''"
complete -c met -n "__fish_met_using_subcommand serve" -l enforce-eager -d 'Run every step op by op, never replaying a captured CUDA graph (slower; for debugging)'
complete -c met -n "__fish_met_using_subcommand serve" -l disable-thinking -d 'Chat templates get `enable_thinking=false` unless a request\'s `chat_template_kwargs` says otherwise'
complete -c met -n "__fish_met_using_subcommand serve" -l no-tui -d 'Do not show the terminal dashboard'
complete -c met -n "__fish_met_using_subcommand serve" -l speculative -d 'Speculative decoding with the checkpoint\'s multi-token-prediction (MTP) head (Qwen3.5/3.6), as our recipes ask (`[serve.speculative]`): the head drafts tokens that the model verifies in its next step; the output is what it would be without'
complete -c met -n "__fish_met_using_subcommand serve" -l enable-expert-parallel -d 'With --tensor-parallel-size: split the routed experts whole over the ranks (each rank a slice of the experts at full width) instead of every expert\'s width; attention stays split by heads (vLLM\'s flag)'
complete -c met -n "__fish_met_using_subcommand serve" -l special-tokens-in-content -d 'Let message content carry control tokens: `<|im_start|>` written in a message becomes the special token, so a client can forge chat turns (the old behaviour; by default what clients write is text and only the chat template\'s markup is control tokens)'
complete -c met -n "__fish_met_using_subcommand serve" -l gdn-fused-norm -d 'Gated DeltaNet\'s output norm fused with its gate: what met\'s kernels always do'
complete -c met -n "__fish_met_using_subcommand serve" -l ssm-batched-recurrent -d 'The recurrent state of a step\'s sequences updated in one batched launch: what met always does'
complete -c met -n "__fish_met_using_subcommand serve" -l prefill-varlen-batch -d 'Prefill chunks of several sequences in one variable-length step: what met always does'
complete -c met -n "__fish_met_using_subcommand serve" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c met -n "__fish_met_using_subcommand serve" -s V -l version -d 'Print version'
complete -c met -n "__fish_met_using_subcommand score" -l device -d 'Where to run the model' -r -f -a "cpu\t''
cuda\t'The first NVIDIA GPU (a `met` built with `--features cuda`; `CUDA_VISIBLE_DEVICES` chooses which)'"
complete -c met -n "__fish_met_using_subcommand score" -l dtype -d 'The type weights, activations and the KV cache are computed in' -r -f -a "auto\t'bfloat16 on cuda, float32 on the cpu'
bfloat16\t'cuda only'
float32\t'Weights, activations and the KV cache in f32: on cuda twice the memory and far slower, for checking against float32 references; what the cpu always does'"
complete -c met -n "__fish_met_using_subcommand score" -l load-format -d 'How to obtain weights' -r -f -a "auto\t'Safetensors weights from the model directory'
dummy\t'Random weights of the right shapes from config.json alone (for benchmarks)'"
complete -c met -n "__fish_met_using_subcommand score" -l requantize -d 'Re-quantize part of the checkpoint as it loads, PART=FORMAT (repeatable or comma-separated): PART lm_head, experts, experts.gate_up or experts.down (the routed experts\' projections), FORMAT nvfp4 (ModelOpt\'s rounding) or bf16. What a recipe\'s [checkpoint.requantize] passes; reported at start-up and in GET /version' -r
complete -c met -n "__fish_met_using_subcommand score" -l tokens -d 'Token ids, comma-separated (e.g. 9707,11,1879)' -r
complete -c met -n "__fish_met_using_subcommand score" -l tokens-file -d 'A JSON file holding an array of token ids' -r -F
complete -c met -n "__fish_met_using_subcommand score" -l top-k -d 'Alternatives to report at each position' -r
complete -c met -n "__fish_met_using_subcommand score" -l kv-cache-dtype -d 'The KV cache\'s number format while scoring (fp8: e4m3 with a scale per head; see `met serve --help`), to measure what the FP8 cache costs in accuracy' -r -f -a "auto\t'The model\'s dtype'
bf16\t''
fp8\t'e4m3 values with one f32 scale per 128 dims of each cached head: about half the memory of bf16 on cuda; the cpu rounds its f32 cache the same way (same accuracy, no saving)'"
complete -c met -n "__fish_met_using_subcommand score" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c met -n "__fish_met_using_subcommand score" -s V -l version -d 'Print version'
complete -c met -n "__fish_met_using_subcommand download" -l revision -d 'The branch, tag or commit to fetch' -r
complete -c met -n "__fish_met_using_subcommand download" -l progress -d '`lines`: a line a file every few seconds; `json`: a JSON object a tenth of a second (`{"file","done","total"}`, bytes), for `metralectl pull`\'s progress bar' -r -f -a "lines\t''
json\t''"
complete -c met -n "__fish_met_using_subcommand download" -s h -l help -d 'Print help'
complete -c met -n "__fish_met_using_subcommand download" -s V -l version -d 'Print version'
complete -c met -n "__fish_met_using_subcommand print-tuning-table" -s h -l help -d 'Print help'
complete -c met -n "__fish_met_using_subcommand print-tuning-table" -s V -l version -d 'Print version'
complete -c met -n "__fish_met_using_subcommand rank" -l rank -d 'This rank, 1 to N - 1' -r
complete -c met -n "__fish_met_using_subcommand rank" -l world -d 'The group size N' -r
complete -c met -n "__fish_met_using_subcommand rank" -l master -d 'Rank 0\'s rendezvous address, HOST:PORT' -r
complete -c met -n "__fish_met_using_subcommand rank" -l fingerprint -d 'What the ranks agree on (rank 0 passes it)' -r
complete -c met -n "__fish_met_using_subcommand rank" -l load-format -r -f -a "auto\t'Safetensors weights from the model directory'
dummy\t'Random weights of the right shapes from config.json alone (for benchmarks)'"
complete -c met -n "__fish_met_using_subcommand rank" -l requantize -r
complete -c met -n "__fish_met_using_subcommand rank" -l kv-cache-fp8
complete -c met -n "__fish_met_using_subcommand rank" -l expert-parallel
complete -c met -n "__fish_met_using_subcommand rank" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c met -n "__fish_met_using_subcommand rank" -s V -l version -d 'Print version'
complete -c met -n "__fish_met_using_subcommand help; and not __fish_seen_subcommand_from serve score download print-tuning-table rank help" -f -a "serve" -d 'Serve the model over an OpenAI-compatible HTTP API'
complete -c met -n "__fish_met_using_subcommand help; and not __fish_seen_subcommand_from serve score download print-tuning-table rank help" -f -a "score" -d 'Score a token sequence: each next token\'s log-probability and the top-k alternatives, as JSON'
complete -c met -n "__fish_met_using_subcommand help; and not __fish_seen_subcommand_from serve score download print-tuning-table rank help" -f -a "download" -d 'Fetch a Hub checkpoint (ORG/NAME) into the Hugging Face cache and print its directory'
complete -c met -n "__fish_met_using_subcommand help; and not __fish_seen_subcommand_from serve score download print-tuning-table rank help" -f -a "print-tuning-table" -d 'Print the tuning settings\' Markdown table (docs/cuda.md\'s "Tuning" is this)'
complete -c met -n "__fish_met_using_subcommand help; and not __fish_seen_subcommand_from serve score download print-tuning-table rank help" -f -a "rank" -d 'One rank of `met serve --tensor-parallel-size N` (started by rank 0, not by hand)'
complete -c met -n "__fish_met_using_subcommand help; and not __fish_seen_subcommand_from serve score download print-tuning-table rank help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
