"""lookahead_reasoning"""
