package com.example.realclient;

import com.google.common.base.Joiner;
import com.google.common.collect.ImmutableList;
import org.apache.commons.lang3.StringUtils;

/** Uses both compile-scope libraries, so the build fails unless both resolve. */
public final class Greeter {
    private Greeter() {}

    public static String greet(String... names) {
        ImmutableList<String> capitalized = ImmutableList.copyOf(names).stream()
                .map(StringUtils::capitalize)
                .collect(ImmutableList.toImmutableList());
        return "Hello, " + Joiner.on(" and ").join(capitalized) + "!";
    }
}
