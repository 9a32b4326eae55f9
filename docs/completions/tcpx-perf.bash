_tcpx__perf() {
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
                cmd="tcpx__perf"
                ;;
            *)
                ;;
        esac
    done

    case "${cmd}" in
        tcpx__perf)
            opts="-b -e -f -i -n -w -c -a -T -g -v -J -h --minbytes --maxbytes --stepfactor --stepbytes --iters --warmup-iters --warmup_iters --check --average --timeout --ngpus --pattern --scope --dir --mem --ranks-per-node --max-peers --connect --connect-peers --chunk --max-reg --channels --window --plugin --abi --net-dev --spread-channels --cpu-bind --poll --setup-threads --connects-in-flight --dry-run --force --plan --plan-json --simulate --out --no-out --progress --plugin-log --verbose --output-file --output_file --healthy-hostfile --drain-list --suspect-share --bad-share --probe-rounds --probe-pairs --warmup-once --iter-time --timing --print-man --completions --baseline --nccl-lib --version --help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 1 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --minbytes)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                -b)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --maxbytes)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                -e)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --stepfactor)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                -f)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --stepbytes)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                -i)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --iters)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                -n)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --warmup_iters)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --warmup-iters)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                -w)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --check)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                -c)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --average)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                -a)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --timeout)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                -T)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --ngpus)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                -g)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --pattern)
                    COMPREPLY=($(compgen -W "sendrecv pairs ring fullmesh" -- "${cur}"))
                    return 0
                    ;;
                --scope)
                    COMPREPLY=($(compgen -W "all inter-node auto" -- "${cur}"))
                    return 0
                    ;;
                --dir)
                    COMPREPLY=($(compgen -W "uni bi" -- "${cur}"))
                    return 0
                    ;;
                --mem)
                    COMPREPLY=($(compgen -W "auto host cuda" -- "${cur}"))
                    return 0
                    ;;
                --ranks-per-node)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --max-peers)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --connect)
                    COMPREPLY=($(compgen -W "all rounds" -- "${cur}"))
                    return 0
                    ;;
                --connect-peers)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --chunk)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --max-reg)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --channels)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --window)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --plugin)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --abi)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --net-dev)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --cpu-bind)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --poll)
                    COMPREPLY=($(compgen -W "adaptive spin" -- "${cur}"))
                    return 0
                    ;;
                --setup-threads)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --connects-in-flight)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --plan)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --plan-json)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --out)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --progress)
                    COMPREPLY=($(compgen -W "auto always never" -- "${cur}"))
                    return 0
                    ;;
                --plugin-log)
                    COMPREPLY=($(compgen -W "warn info trace none" -- "${cur}"))
                    return 0
                    ;;
                --output_file)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --output-file)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                -J)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --healthy-hostfile)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --drain-list)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --suspect-share)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --bad-share)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --probe-rounds)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --probe-pairs)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --iter-time)
                    COMPREPLY=($(compgen -W "reduced max" -- "${cur}"))
                    return 0
                    ;;
                --timing)
                    COMPREPLY=($(compgen -W "per-iteration back-to-back" -- "${cur}"))
                    return 0
                    ;;
                --completions)
                    COMPREPLY=($(compgen -W "bash elvish fish powershell zsh" -- "${cur}"))
                    return 0
                    ;;
                --baseline)
                    COMPREPLY=($(compgen -W "nccl" -- "${cur}"))
                    return 0
                    ;;
                --nccl-lib)
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
    esac
}

if [[ "${BASH_VERSINFO[0]}" -eq 4 && "${BASH_VERSINFO[1]}" -ge 4 || "${BASH_VERSINFO[0]}" -gt 4 ]]; then
    complete -F _tcpx__perf -o nosort -o bashdefault -o default tcpx-perf
else
    complete -F _tcpx__perf -o bashdefault -o default tcpx-perf
fi
