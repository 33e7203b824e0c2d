-- Reads a lock for an operator (state.lua), changing nothing.
return state()
