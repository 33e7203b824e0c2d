package dlmtest

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"

	lua "github.com/yuin/gopher-lua"
	"github.com/yuin/gopher-lua/parse"

	"github.com/dlmgo/dlm/internal/sha1"
)

// Redis 7.0.15, the version this package answers as (REDIS_VERSION_NUM,
// INFO server).
const (
	redisVersion    = "7.0.15"
	redisVersionNum = 0x07000f
)

// sha1Hex is SHA1 as Redis computes it, without crypto/sha1 (which panics
// under GODEBUG=fips140=only).
func sha1Hex(src string) string { return sha1.Hex(src) }

// newLua returns the server's Lua VM: the libraries Redis gives scripts
// (base without file access, table, string, math), the redis table, and
// globals read-only as in Redis 7.
func (sv *server) newLua() *lua.LState {
	// A registry that starts small and grows to the default's size: a
	// server's state is made at its start and each restart, and scripts
	// use few registers.
	L := lua.NewState(lua.Options{SkipOpenLibs: true, RegistrySize: 1024, RegistryMaxSize: lua.RegistrySize})
	for _, lib := range []struct {
		name string
		open lua.LGFunction
	}{{lua.BaseLibName, lua.OpenBase}, {lua.TabLibName, lua.OpenTable}, {lua.StringLibName, lua.OpenString}, {lua.MathLibName, lua.OpenMath}} {
		L.Push(L.NewFunction(lib.open))
		L.Push(lua.LString(lib.name))
		L.Call(1, 0)
	}
	g := L.G.Global
	// string.format('%d', n), in every acquisition, without fmt.Sprintf;
	// anything else as gopher-lua formats it.
	str := g.RawGetString(lua.StringLibName).(*lua.LTable)
	format := str.RawGetString("format").(*lua.LFunction).GFunction
	str.RawSetString("format", L.NewFunction(func(L *lua.LState) int {
		if L.GetTop() == 2 && L.Get(1) == lua.LString("%d") {
			if n, ok := L.Get(2).(lua.LNumber); ok {
				L.Push(lua.LString(strconv.FormatInt(int64(n), 10)))
				return 1
			}
		}
		return format(L)
	}))
	for _, name := range []string{"dofile", "loadfile", "load", "loadstring", "require", "module", "collectgarbage", "print", "_printregs"} {
		g.RawSetString(name, lua.LNil)
	}
	r := L.NewTable()
	r.RawSetString("call", L.NewFunction(func(L *lua.LState) int { return sv.luaCall(L, true) }))
	r.RawSetString("pcall", L.NewFunction(func(L *lua.LState) int { return sv.luaCall(L, false) }))
	r.RawSetString("error_reply", L.NewFunction(func(L *lua.LState) int {
		t := L.NewTable()
		t.RawSetString("err", lua.LString(L.CheckString(1)))
		L.Push(t)
		return 1
	}))
	r.RawSetString("status_reply", L.NewFunction(func(L *lua.LState) int {
		t := L.NewTable()
		t.RawSetString("ok", lua.LString(L.CheckString(1)))
		L.Push(t)
		return 1
	}))
	r.RawSetString("sha1hex", L.NewFunction(func(L *lua.LState) int {
		L.Push(lua.LString(sha1Hex(L.CheckString(1))))
		return 1
	}))
	r.RawSetString("REDIS_VERSION", lua.LString(redisVersion))
	r.RawSetString("REDIS_VERSION_NUM", lua.LNumber(redisVersionNum))
	g.RawSetString("redis", r)
	g.RawSetString("KEYS", L.NewTable())
	g.RawSetString("ARGV", L.NewTable())
	mt := L.NewTable()
	mt.RawSetString("__newindex", L.NewFunction(func(L *lua.LState) int {
		L.RaiseError("Attempt to modify a readonly table")
		return 0
	}))
	mt.RawSetString("__index", L.NewFunction(func(L *lua.LState) int {
		L.RaiseError("Script attempted to access nonexistent global variable '%s'", L.CheckString(2))
		return 0
	}))
	L.SetMetatable(g, mt)
	return L
}

// luaCall is redis.call (raise) and redis.pcall (return the error table).
func (sv *server) luaCall(L *lua.LState, raise bool) int {
	n := L.GetTop()
	if n == 0 {
		return sv.luaError(L, raise, "ERR Please specify at least one argument for this redis lib call")
	}
	args := make([]string, n)
	for i := 1; i <= n; i++ {
		switch v := L.Get(i).(type) {
		case lua.LString:
			args[i-1] = string(v)
		case lua.LNumber:
			args[i-1] = luaNumber(float64(v))
		default:
			return sv.luaError(L, raise, "ERR Lua redis lib command arguments must be strings or integers")
		}
	}
	reply := sv.do(args)
	if e, ok := reply.(replyError); ok {
		return sv.luaError(L, raise, string(e))
	}
	L.Push(toLua(L, reply))
	return 1
}

func (sv *server) luaError(L *lua.LState, raise bool, msg string) int {
	t := L.NewTable()
	t.RawSetString("err", lua.LString(msg))
	if raise {
		L.Error(t, 1)
	}
	L.Push(t)
	return 1
}

// luaNumber formats a number argument of redis.call as Redis' Lua does
// ("%.17g"): integers in full.
func luaNumber(f float64) string {
	if f == math.Trunc(f) && math.Abs(f) < 1<<63 {
		return strconv.FormatInt(int64(f), 10)
	}
	return strconv.FormatFloat(f, 'g', 17, 64)
}

// toLua converts a command's reply as Redis does for redis.call.
func toLua(L *lua.LState, r any) lua.LValue {
	switch v := r.(type) {
	case int64:
		return lua.LNumber(v)
	case string:
		return lua.LString(v)
	case nil:
		return lua.LFalse
	case status:
		t := L.NewTable()
		t.RawSetString("ok", lua.LString(v))
		return t
	case []any:
		t := L.CreateTable(len(v), 0)
		for i, e := range v {
			t.RawSetInt(i+1, toLua(L, e))
		}
		return t
	}
	panic(fmt.Sprintf("dlmtest: reply of type %T", r))
}

// fromLua converts a script's return value to a reply as Redis does:
// numbers to integers (truncated), strings to bulk strings, true to 1,
// false and nil to nil, a table with err or ok to an error or status,
// other tables to arrays up to their first nil.
func fromLua(v lua.LValue) any {
	switch x := v.(type) {
	case lua.LNumber:
		return int64(float64(x))
	case lua.LString:
		return string(x)
	case lua.LBool:
		if x {
			return int64(1)
		}
		return nil
	case *lua.LTable:
		if e, ok := x.RawGetString("err").(lua.LString); ok {
			return replyError(e)
		}
		if s, ok := x.RawGetString("ok").(lua.LString); ok {
			return status(s)
		}
		out := []any{}
		for i := 1; ; i++ {
			e := x.RawGetInt(i)
			if e == lua.LNil {
				return out
			}
			out = append(out, fromLua(e))
		}
	}
	return nil
}

// eval runs a script (EVAL when src is set, else EVALSHA of sha) and
// returns its reply.
func (sv *server) eval(sha, src string, keys, args []string) any {
	if sv.lua == nil {
		sv.lua = sv.newLua()
	}
	L := sv.lua
	name := "evalsha"
	if src != "" {
		name = "eval"
		sha = sha1Hex(src)
	}
	sv.stats[name]++
	proto, ok := sv.scripts[sha]
	if !ok {
		if src == "" {
			return replyError("NOSCRIPT No matching script. Please use EVAL.")
		}
		var err error
		if proto, err = compile(sha, src); err != nil {
			return replyError("ERR Error compiling script (new function): " + firstLine(err.Error()))
		}
		sv.scripts[sha] = proto
	}
	g := L.G.Global
	g.RawSetString("KEYS", strTable(L, keys))
	g.RawSetString("ARGV", strTable(L, args))
	L.Push(L.NewFunctionFromProto(proto))
	err := L.PCall(0, 1, nil)
	defer L.SetTop(0)
	if err != nil {
		if ae, ok := err.(*lua.ApiError); ok {
			if t, ok := ae.Object.(*lua.LTable); ok {
				if e, ok := t.RawGetString("err").(lua.LString); ok {
					return replyError(string(e) + " script: " + sha)
				}
			}
			return replyError("ERR " + firstLine(ae.Object.String()) + " script: " + sha)
		}
		return replyError("ERR " + firstLine(err.Error()) + " script: " + sha)
	}
	return fromLua(L.Get(-1))
}

// compiled holds every script compiled in the process, by SHA1: a
// FunctionProto is read-only, and LStates share it (gopher-lua's README),
// so servers and their restarts do not compile a script again. A server
// still answers NOSCRIPT until it was sent the source (sv.scripts).
var compiled sync.Map // string → *lua.FunctionProto

func compile(sha, src string) (*lua.FunctionProto, error) {
	if p, ok := compiled.Load(sha); ok {
		return p.(*lua.FunctionProto), nil
	}
	chunk, err := parse.Parse(strings.NewReader(src), "user_script")
	if err != nil {
		return nil, err
	}
	proto, err := lua.Compile(chunk, "user_script")
	if err != nil {
		return nil, err
	}
	// A script is the body of a function without parameters, as in Redis
	// (where '...' in it does not compile): the call need not build
	// Lua 5.0's arg table.
	proto.IsVarArg &^= lua.VarArgNeedsArg
	compiled.Store(sha, proto)
	return proto, nil
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

func strTable(L *lua.LState, ss []string) *lua.LTable {
	t := L.CreateTable(len(ss), 0)
	for i, s := range ss {
		t.RawSetInt(i+1, lua.LString(s))
	}
	return t
}
