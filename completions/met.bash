_met() {
    local i cur prev opts cmd
    COMPREPLY=()
    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
        cur="$2"
    else
        cur="${COMP_WORDS[COMP_CWORD]}"
    fi
    prev="$3"
    cmd=""
    opts=""

    for i in "${COMP_WORDS[@]:0:COMP_CWORD}"
    do
        case "${cmd},${i}" in
            ",$1")
                cmd="met"
                ;;
            met,download)
                cmd="met__subcmd__download"
                ;;
            met,help)
                cmd="met__subcmd__help"
                ;;
            met,print-tuning-table)
                cmd="met__subcmd__print__subcmd__tuning__subcmd__table"
                ;;
            met,rank)
                cmd="met__subcmd__rank"
                ;;
            met,score)
                cmd="met__subcmd__score"
                ;;
            met,serve)
                cmd="met__subcmd__serve"
                ;;
            met__subcmd__help,download)
                cmd="met__subcmd__help__subcmd__download"
                ;;
            met__subcmd__help,help)
                cmd="met__subcmd__help__subcmd__help"
                ;;
            met__subcmd__help,print-tuning-table)
                cmd="met__subcmd__help__subcmd__print__subcmd__tuning__subcmd__table"
                ;;
            met__subcmd__help,rank)
                cmd="met__subcmd__help__subcmd__rank"
                ;;
            met__subcmd__help,score)
                cmd="met__subcmd__help__subcmd__score"
                ;;
            met__subcmd__help,serve)
                cmd="met__subcmd__help__subcmd__serve"
                ;;
            *)
                ;;
        esac
    done

    case "${cmd}" in
        met)
            opts="-h -V --help --version serve score download print-tuning-table rank help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 1 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        met__subcmd__download)
            opts="-h -V --revision --progress --help --version"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --revision)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --progress)
                    COMPREPLY=($(compgen -W "lines json" -- "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        met__subcmd__help)
            opts="serve score download print-tuning-table rank help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        met__subcmd__help__subcmd__download)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        met__subcmd__help__subcmd__help)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        met__subcmd__help__subcmd__print__subcmd__tuning__subcmd__table)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        met__subcmd__help__subcmd__rank)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        met__subcmd__help__subcmd__score)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        met__subcmd__help__subcmd__serve)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        met__subcmd__print__subcmd__tuning__subcmd__table)
            opts="-h -V --help --version"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        met__subcmd__rank)
            opts="-h -V --rank --world --master --fingerprint --load-format --requantize --kv-cache-fp8 --expert-parallel --help --version"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --rank)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --world)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --master)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --fingerprint)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --load-format)
                    COMPREPLY=($(compgen -W "auto dummy" -- "${cur}"))
                    return 0
                    ;;
                --requantize)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        met__subcmd__score)
            opts="-h -V --device --dtype --load-format --requantize --tokens --tokens-file --top-k --kv-cache-dtype --help --version"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --device)
                    COMPREPLY=($(compgen -W "cpu cuda" -- "${cur}"))
                    return 0
                    ;;
                --dtype)
                    COMPREPLY=($(compgen -W "auto bfloat16 float32" -- "${cur}"))
                    return 0
                    ;;
                --load-format)
                    COMPREPLY=($(compgen -W "auto dummy" -- "${cur}"))
                    return 0
                    ;;
                --requantize)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --tokens)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --tokens-file)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --top-k)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --kv-cache-dtype)
                    COMPREPLY=($(compgen -W "auto bf16 fp8" -- "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        met__subcmd__serve)
            opts="-h -V --device --dtype --load-format --requantize --host --port --model-name --revision --max-seq-len --max-batch-size --max-num-batched-tokens --prefill-chunk-with-decodes --gpu-memory-utilization --kv-cache-dtype --enable-prefix-caching --enforce-eager --api-key --max-queued-requests --request-timeout --disable-thinking --no-tui --tool-call-parser --reasoning-parser --num-gpu-blocks-override --ssm-cache-slots --ssm-checkpoint-slots --ssm-checkpoint-interval --speculative --num-drafts --tensor-parallel-size --enable-expert-parallel --nnodes --node-rank --master-addr --master-port --dist-timeout --speculative-max-batch --header-read-timeout --body-read-timeout --keep-alive-timeout --max-connections --tokenizer-workers --special-tokens-in-content --speculative-ladder --speculative-draft-cost --metrics-socket --mtp-gate --scheduling-policy --mtp-quantization --disable-tool-grammar --ssm-h-dtype --gdn-fused-norm --ssm-batched-recurrent --ssm-tail-midchunk --prefill-varlen-batch --help --version"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --device)
                    COMPREPLY=($(compgen -W "cpu cuda" -- "${cur}"))
                    return 0
                    ;;
                --dtype)
                    COMPREPLY=($(compgen -W "auto bfloat16 float32" -- "${cur}"))
                    return 0
                    ;;
                --load-format)
                    COMPREPLY=($(compgen -W "auto dummy" -- "${cur}"))
                    return 0
                    ;;
                --requantize)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --host)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --port)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --model-name)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --revision)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --max-seq-len)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --max-batch-size)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --max-num-batched-tokens)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --prefill-chunk-with-decodes)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --gpu-memory-utilization)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --kv-cache-dtype)
                    COMPREPLY=($(compgen -W "auto bf16 fp8" -- "${cur}"))
                    return 0
                    ;;
                --enable-prefix-caching)
                    COMPREPLY=($(compgen -W "true false" -- "${cur}"))
                    return 0
                    ;;
                --api-key)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --max-queued-requests)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --request-timeout)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --tool-call-parser)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --reasoning-parser)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --num-gpu-blocks-override)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --ssm-cache-slots)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --ssm-checkpoint-slots)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --ssm-checkpoint-interval)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --num-drafts)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --tensor-parallel-size)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --nnodes)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --node-rank)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --master-addr)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --master-port)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --dist-timeout)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --speculative-max-batch)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --header-read-timeout)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --body-read-timeout)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --keep-alive-timeout)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --max-connections)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --tokenizer-workers)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --speculative-ladder)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --speculative-draft-cost)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --metrics-socket)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --mtp-gate)
                    COMPREPLY=($(compgen -W "auto force" -- "${cur}"))
                    return 0
                    ;;
                --scheduling-policy)
                    COMPREPLY=($(compgen -W "fifo" -- "${cur}"))
                    return 0
                    ;;
                --mtp-quantization)
                    COMPREPLY=($(compgen -W "bf16" -- "${cur}"))
                    return 0
                    ;;
                --disable-tool-grammar)
                    COMPREPLY=($(compgen -W "true false" -- "${cur}"))
                    return 0
                    ;;
                --ssm-h-dtype)
                    COMPREPLY=($(compgen -W "f32 f16-pool" -- "${cur}"))
                    return 0
                    ;;
                --ssm-tail-midchunk)
                    COMPREPLY=($(compgen -W "true false" -- "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
    esac
}

if [[ "${BASH_VERSINFO[0]}" -eq 4 && "${BASH_VERSINFO[1]}" -ge 4 || "${BASH_VERSINFO[0]}" -gt 4 ]]; then
    complete -F _met -o nosort -o bashdefault -o default met
else
    complete -F _met -o bashdefault -o default met
fi
