
use builtin;
use str;

set edit:completion:arg-completer[metralectl] = {|@words|
    fn spaces {|n|
        builtin:repeat $n ' ' | str:join ''
    }
    fn cand {|text desc|
        edit:complex-candidate $text &display=$text' '(spaces (- 14 (wcswidth $text)))$desc
    }
    var command = 'metralectl'
    for word $words[1..-1] {
        if (str:has-prefix $word '-') {
            break
        }
        set command = $command';'$word
    }
    var completions = [
        &'metralectl'= {
            cand -q 'Print only the result: no notes or warnings'
            cand --quiet 'Print only the result: no notes or warnings'
            cand -h 'Print help'
            cand --help 'Print help'
            cand -V 'Print version'
            cand --version 'Print version'
            cand list 'List the recipes: built-in ones and yours'
            cand show 'Show everything a recipe pins, and whether it fits this machine'
            cand run 'Start a recipe: in a container when Docker and the NVIDIA runtime are ready, else natively'
            cand top 'Live dashboard of a running engine: throughput, batch, KV cache, every request'
            cand chat 'Talk to a model in the terminal: a running engine, or a recipe started for it'
            cand doctor 'Check this machine: Docker, NVIDIA runtime and driver, disk, port, shared memory, Hub token'
            cand ps 'List the running engines'
            cand stop 'Stop engines (a container is removed)'
            cand logs 'Show an engine''s log'
            cand pull 'Fetch a recipe''s engine image and Hub checkpoint ahead of time'
            cand completions 'Write shell completions to stdout'
            cand bench 'Measure an OpenAI-compatible server over a concurrency ladder (see docs/benchmarks.md)'
            cand sign 'Sign a file (a release''s SHA256SUMS, a benchmark record): writes FILE.minisig'
            cand verify 'Check a signed file (a release''s SHA256SUMS, a benchmark record) against a trusted key'
            cand self 'Update or remove this installation of metralectl and met'
            cand help 'Print this message or the help of the given subcommand(s)'
        }
        &'metralectl;list'= {
            cand --vendor 'Only recipes whose checkpoint comes from this vendor (e.g. Qwen, NVIDIA)'
            cand --family 'Only recipes of this model family (e.g. qwen3, qwen3.6)'
            cand --json 'Print JSON (see docs/recipes.md for its fields)'
            cand --names 'Print only the names, one a line (shell completion reads them)'
            cand -q 'Print only the result: no notes or warnings'
            cand --quiet 'Print only the result: no notes or warnings'
            cand -h 'Print help'
            cand --help 'Print help'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'metralectl;show'= {
            cand --json 'Print JSON (see docs/recipes.md for its fields)'
            cand -q 'Print only the result: no notes or warnings'
            cand --quiet 'Print only the result: no notes or warnings'
            cand -h 'Print help'
            cand --help 'Print help'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'metralectl;run'= {
            cand --port 'Serve on this port instead of the recipe''s'
            cand --host 'Address to serve on (in a container: the host side of the port binding). The default keeps the engine to this machine; 0.0.0.0 opens it to every network it is on'
            cand --gpus 'GPUs to give the engine: `all`, or indices like `0,1`'
            cand --api-key 'Require `Authorization: Bearer KEY` on the API (passed to the engine as MET_API_KEY)'
            cand --name 'Name of the engine for ps/stop/logs [default: the recipe name]'
            cand --image 'Use this engine image instead of the recipe''s (e.g. one built locally)'
            cand --ready-timeout 'Give up if the engine is not ready after this many seconds'
            cand --print 'Print the docker and native commands instead of running anything'
            cand --native 'Run `met` as a native process (found beside metralectl, then on PATH)'
            cand --docker 'Run the engine image in a container through the Docker Engine'
            cand -d 'Return once the engine is ready and leave it running (`metralectl stop` ends it)'
            cand --detach 'Return once the engine is ready and leave it running (`metralectl stop` ends it)'
            cand --skip-checks 'Start even when this machine lacks the GPU, memory or compute capability the recipe asks for, or the engine lacks what its model needs on its device (the checks run before any download)'
            cand --json 'With --print: print JSON (see docs/recipes.md for its fields)'
            cand -q 'Print only the result: no notes or warnings'
            cand --quiet 'Print only the result: no notes or warnings'
            cand -h 'Print help'
            cand --help 'Print help'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'metralectl;top'= {
            cand --socket 'The engine''s metrics socket [default: the one `met serve` makes for --port]'
            cand --url 'Read `URL/v1/metrics/stream` instead (a remote engine or a container)'
            cand --api-key 'The engine''s API key, for --url'
            cand --port 'The engine''s port, to find its default socket [default: 8000]'
            cand -q 'Print only the result: no notes or warnings'
            cand --quiet 'Print only the result: no notes or warnings'
            cand -h 'Print help'
            cand --help 'Print help'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'metralectl;chat'= {
            cand --url 'Talk to this OpenAI-compatible server instead (e.g. http://127.0.0.1:8000)'
            cand --api-key 'The engine''s API key'
            cand --model 'The model name to send [default: the first the server''s /v1/models lists]'
            cand --system 'A system message that starts the conversation (and survives /reset)'
            cand --max-tokens 'Most tokens a reply may have [default: the engine''s]'
            cand --temperature 'Sampling temperature [default: the model''s]'
            cand --port 'When the recipe is started for the chat: serve on this port instead of the recipe''s'
            cand -q 'Print only the result: no notes or warnings'
            cand --quiet 'Print only the result: no notes or warnings'
            cand -h 'Print help'
            cand --help 'Print help'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'metralectl;doctor'= {
            cand --port 'Check this port instead of the default (8000)'
            cand --json 'Print JSON: each check''s id, status, finding and fix'
            cand -q 'Print only the result: no notes or warnings'
            cand --quiet 'Print only the result: no notes or warnings'
            cand -h 'Print help'
            cand --help 'Print help'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'metralectl;ps'= {
            cand --json 'Print JSON'
            cand -q 'Print only the result: no notes or warnings'
            cand --quiet 'Print only the result: no notes or warnings'
            cand -h 'Print help'
            cand --help 'Print help'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'metralectl;stop'= {
            cand --all 'Stop every running engine'
            cand -q 'Print only the result: no notes or warnings'
            cand --quiet 'Print only the result: no notes or warnings'
            cand -h 'Print help'
            cand --help 'Print help'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'metralectl;logs'= {
            cand --tail 'Only the last N lines'
            cand -f 'Keep printing new lines until the engine stops (or Ctrl-C)'
            cand --follow 'Keep printing new lines until the engine stops (or Ctrl-C)'
            cand -q 'Print only the result: no notes or warnings'
            cand --quiet 'Print only the result: no notes or warnings'
            cand -h 'Print help'
            cand --help 'Print help'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'metralectl;pull'= {
            cand --image 'Pull this image instead of the recipe''s'
            cand --no-image 'Only the checkpoint (for native runs): do not pull the engine image'
            cand -q 'Print only the result: no notes or warnings'
            cand --quiet 'Print only the result: no notes or warnings'
            cand -h 'Print help'
            cand --help 'Print help'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'metralectl;completions'= {
            cand -q 'Print only the result: no notes or warnings'
            cand --quiet 'Print only the result: no notes or warnings'
            cand -h 'Print help'
            cand --help 'Print help'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'metralectl;bench'= {
            cand --url 'Base URL of the OpenAI-compatible server (e.g. http://127.0.0.1:8000)'
            cand --model 'The model name to send [default: the first one the server''s /v1/models lists]'
            cand --concurrency 'The ladder: concurrent requests of each rung, comma-separated'
            cand --isl 'Prompt tokens a request, exactly'
            cand --osl 'Generated tokens a request, exactly'
            cand --reps 'Timed repetitions a rung'
            cand --warmup 'Untimed repetitions before the timed ones, a rung'
            cand --seed 'Seed of the prompts and of the sampler'
            cand --temperature 'Sampling temperature'
            cand --api-key 'The server''s API key (sent as `Authorization: Bearer KEY`)'
            cand --against 'Run the same ladder against this second server too, alternating rep by rep, and report the ratio a rung'
            cand --against-model 'The model name to send to --against [default: the first one its /v1/models lists]'
            cand --endpoint 'Which API to drive'
            cand --request-timeout 'Give up on a request after this many seconds (it counts as an error)'
            cand --record 'Write the run as a record (JSON, see docs/benchmarks.md)'
            cand --response-format 'Constrain every request to the measured server (not --against''s) with this `response_format`: `json_object`, or FILE holding a JSON schema (sent as `json_schema`). With the bench''s `ignore_eos` the server writes one value after another up to --osl. `--against` the same URL measures the free ladder beside it (the ratio is constrained / free)'
            cand --sign 'Sign the record with this secret key (from `metralectl bench keygen`): writes FILE.minisig'
            cand --streams 'Streams decoding at once; each sends its next request as soon as its last one ends'
            cand --long-isl 'Prompt tokens of each long prompt'
            cand --long-osl 'Generated tokens of each long prompt'
            cand --long-every 'Time between two long prompts'' arrivals (`1s`, `500ms`, `0.5s`, `2m`; a bare number is seconds)'
            cand --duration 'How long each phase lasts: the baseline (streams alone), then the loaded one'
            cand --json 'Print the record as JSON instead of a table'
            cand --mixed 'Run the mixed load instead of the ladder: --streams requests decoding continuously (ISL/OSL from --isl/--osl), first alone, then while a long prompt arrives every --long-every; reports the streams'' ITL in both phases and the long prompts'' TTFT'
            cand -q 'Print only the result: no notes or warnings'
            cand --quiet 'Print only the result: no notes or warnings'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
            cand -V 'Print version'
            cand --version 'Print version'
            cand gate 'Rerun a baseline record''s workload; fail when a rung is slower than the baseline by more than the tolerance, or when greedy outputs are not deterministic or leak special tokens'
            cand report 'Generate bench/README.md (a table a record) and bench/ladder.svg (tok/s against concurrency per series) from the committed records'
            cand keygen 'Write a minisign key pair for `--sign`: KEYFILE (secret, mode 0600) and KEYFILE.pub'
            cand help 'Print this message or the help of the given subcommand(s)'
        }
        &'metralectl;bench;gate'= {
            cand --baseline 'The baseline record (e.g. bench/baselines/NAME.json)'
            cand --url 'The server to measure [default: the baseline''s URL]'
            cand --api-key 'The server''s API key (sent as `Authorization: Bearer KEY`)'
            cand --model 'Send this model name instead of the baseline''s (the same model served under another name)'
            cand --tolerance 'How much slower than the baseline a rung may be, as a fraction'
            cand --json 'Print JSON'
            cand -q 'Print only the result: no notes or warnings'
            cand --quiet 'Print only the result: no notes or warnings'
            cand -h 'Print help'
            cand --help 'Print help'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'metralectl;bench;report'= {
            cand --records 'The directory of records'
            cand --out 'Where README.md and ladder.svg go'
            cand -q 'Print only the result: no notes or warnings'
            cand --quiet 'Print only the result: no notes or warnings'
            cand -h 'Print help'
            cand --help 'Print help'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'metralectl;bench;keygen'= {
            cand -q 'Print only the result: no notes or warnings'
            cand --quiet 'Print only the result: no notes or warnings'
            cand -h 'Print help'
            cand --help 'Print help'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'metralectl;bench;help'= {
            cand gate 'Rerun a baseline record''s workload; fail when a rung is slower than the baseline by more than the tolerance, or when greedy outputs are not deterministic or leak special tokens'
            cand report 'Generate bench/README.md (a table a record) and bench/ladder.svg (tok/s against concurrency per series) from the committed records'
            cand keygen 'Write a minisign key pair for `--sign`: KEYFILE (secret, mode 0600) and KEYFILE.pub'
            cand help 'Print this message or the help of the given subcommand(s)'
        }
        &'metralectl;bench;help;gate'= {
        }
        &'metralectl;bench;help;report'= {
        }
        &'metralectl;bench;help;keygen'= {
        }
        &'metralectl;bench;help;help'= {
        }
        &'metralectl;sign'= {
            cand --key 'The secret key (from `metralectl bench keygen`, or `minisign -G -W`)'
            cand --trusted-comment 'The signed comment [default: `timestamp:UNIX_TIME<TAB>file:NAME`, as minisign writes]'
            cand -q 'Print only the result: no notes or warnings'
            cand --quiet 'Print only the result: no notes or warnings'
            cand -h 'Print help'
            cand --help 'Print help'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'metralectl;verify'= {
            cand --sig 'Its signature [default: FILE.minisig]'
            cand --pubkey 'Trust only this public key (a KEYFILE.pub) [default: the keys built in: the release key and bench/keys/*.pub]'
            cand --key 'Trust only this public key (a KEYFILE.pub) [default: the keys built in: the release key and bench/keys/*.pub]'
            cand --json 'Print JSON'
            cand -q 'Print only the result: no notes or warnings'
            cand --quiet 'Print only the result: no notes or warnings'
            cand -h 'Print help'
            cand --help 'Print help'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'metralectl;self'= {
            cand -q 'Print only the result: no notes or warnings'
            cand --quiet 'Print only the result: no notes or warnings'
            cand -h 'Print help'
            cand --help 'Print help'
            cand -V 'Print version'
            cand --version 'Print version'
            cand update 'Install the latest release (or --version) after checking its signature and hash'
            cand uninstall 'Remove metralectl, met and what the installer added to your shell profile'
            cand help 'Print this message or the help of the given subcommand(s)'
        }
        &'metralectl;self;update'= {
            cand --version 'Install this version (up or down) instead of the latest'
            cand --url 'Where releases live: URL/download/vVERSION/ and URL/latest/download/'
            cand --pubkey 'Trust this public key instead of the built-in release key (a mirror that signs its own releases; the tests)'
            cand --json 'Print JSON'
            cand -q 'Print only the result: no notes or warnings'
            cand --quiet 'Print only the result: no notes or warnings'
            cand -h 'Print help'
            cand --help 'Print help'
        }
        &'metralectl;self;uninstall'= {
            cand -y 'Do not ask for confirmation'
            cand --yes 'Do not ask for confirmation'
            cand -q 'Print only the result: no notes or warnings'
            cand --quiet 'Print only the result: no notes or warnings'
            cand -h 'Print help'
            cand --help 'Print help'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'metralectl;self;help'= {
            cand update 'Install the latest release (or --version) after checking its signature and hash'
            cand uninstall 'Remove metralectl, met and what the installer added to your shell profile'
            cand help 'Print this message or the help of the given subcommand(s)'
        }
        &'metralectl;self;help;update'= {
        }
        &'metralectl;self;help;uninstall'= {
        }
        &'metralectl;self;help;help'= {
        }
        &'metralectl;help'= {
            cand list 'List the recipes: built-in ones and yours'
            cand show 'Show everything a recipe pins, and whether it fits this machine'
            cand run 'Start a recipe: in a container when Docker and the NVIDIA runtime are ready, else natively'
            cand top 'Live dashboard of a running engine: throughput, batch, KV cache, every request'
            cand chat 'Talk to a model in the terminal: a running engine, or a recipe started for it'
            cand doctor 'Check this machine: Docker, NVIDIA runtime and driver, disk, port, shared memory, Hub token'
            cand ps 'List the running engines'
            cand stop 'Stop engines (a container is removed)'
            cand logs 'Show an engine''s log'
            cand pull 'Fetch a recipe''s engine image and Hub checkpoint ahead of time'
            cand completions 'Write shell completions to stdout'
            cand bench 'Measure an OpenAI-compatible server over a concurrency ladder (see docs/benchmarks.md)'
            cand sign 'Sign a file (a release''s SHA256SUMS, a benchmark record): writes FILE.minisig'
            cand verify 'Check a signed file (a release''s SHA256SUMS, a benchmark record) against a trusted key'
            cand self 'Update or remove this installation of metralectl and met'
            cand help 'Print this message or the help of the given subcommand(s)'
        }
        &'metralectl;help;list'= {
        }
        &'metralectl;help;show'= {
        }
        &'metralectl;help;run'= {
        }
        &'metralectl;help;top'= {
        }
        &'metralectl;help;chat'= {
        }
        &'metralectl;help;doctor'= {
        }
        &'metralectl;help;ps'= {
        }
        &'metralectl;help;stop'= {
        }
        &'metralectl;help;logs'= {
        }
        &'metralectl;help;pull'= {
        }
        &'metralectl;help;completions'= {
        }
        &'metralectl;help;bench'= {
            cand gate 'Rerun a baseline record''s workload; fail when a rung is slower than the baseline by more than the tolerance, or when greedy outputs are not deterministic or leak special tokens'
            cand report 'Generate bench/README.md (a table a record) and bench/ladder.svg (tok/s against concurrency per series) from the committed records'
            cand keygen 'Write a minisign key pair for `--sign`: KEYFILE (secret, mode 0600) and KEYFILE.pub'
        }
        &'metralectl;help;bench;gate'= {
        }
        &'metralectl;help;bench;report'= {
        }
        &'metralectl;help;bench;keygen'= {
        }
        &'metralectl;help;sign'= {
        }
        &'metralectl;help;verify'= {
        }
        &'metralectl;help;self'= {
            cand update 'Install the latest release (or --version) after checking its signature and hash'
            cand uninstall 'Remove metralectl, met and what the installer added to your shell profile'
        }
        &'metralectl;help;self;update'= {
        }
        &'metralectl;help;self;uninstall'= {
        }
        &'metralectl;help;help'= {
        }
    ]
    $completions[$command]
}
