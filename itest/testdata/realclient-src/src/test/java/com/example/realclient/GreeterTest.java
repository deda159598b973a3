package com.example.realclient;

import static org.junit.Assert.assertEquals;

import org.junit.Test;

public class GreeterTest {
    @Test
    public void greetsEveryoneCapitalized() {
        assertEquals("Hello, Maven and Gradle!", Greeter.greet("maven", "gradle"));
    }
}
